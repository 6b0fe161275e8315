"""``dpsql serve`` answers joins as BI tools send them: a private table joined with a public one (both served from
files, the public one declared ``public: true``), bare and wrapped in the outer SELECT a BI tool adds."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import psycopg
import yaml

import dpsql
from serve_helpers import dsn, running, write_config


def test_served_tables_join_as_bi_tools_write_them(tmp_path: Path) -> None:
    config = write_config(tmp_path, pd.DataFrame({"person": [1, 2], "sex": ["F", "M"]}), {"privacy_unit": "person", "columns": {"sex": {"categories": ["F", "M"]}}})
    document = yaml.safe_load(config.read_text())
    pd.DataFrame({"person_id": [1, 1, 2, 3], "clinic_id": [0, 1, 1, 0]}).to_parquet(tmp_path / "visits.parquet")
    pd.DataFrame({"id": [0, 1], "region": ["north", "south"]}).to_parquet(tmp_path / "clinics.parquet")
    document["tables"]["visits"] = {"source": "visits.parquet", "schema": {"privacy_unit": "person_id", "max_rows_per_unit": 3, "foreign_keys": {"clinic_id": "clinics.id"}}}
    document["tables"]["clinics"] = {"source": "clinics.parquet", "schema": {"public": True}}
    config.write_text(yaml.safe_dump(document))
    sql = "SELECT c.region, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region ORDER BY c.region"
    with running(config) as server, psycopg.connect(dsn(server, "alice")) as connection:
        with dpsql.testing.noise_disabled():
            assert connection.execute(sql).fetchall() == [("north", 2.0), ("south", 2.0)]
            wrapped = f"SELECT * FROM ({sql.replace('visits', 'public.visits').replace('clinics', 'public.clinics')}) AS virtual_table LIMIT 1000"
            assert connection.execute(wrapped).fetchall() == [("north", 2.0), ("south", 2.0)]
        comment = connection.execute("SELECT obj_description(c.oid, 'pg_class') FROM pg_class c WHERE c.relname = 'clinics'").fetchone()
        assert comment is not None and "public table" in str(comment[0])
