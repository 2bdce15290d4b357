"""Tests of the study's CSV, report and chart code, without a server:
/usr/bin/python3 -m unittest discover -s benches -p 'test_*.py'"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402

HEADER = ("strategy,clients,rows,seconds,rows_per_s,leaf_splits,upper_splits,new_roots,leaf_pages,"
          "avg_leaf_density,leaf_fragmentation,index_bytes,table_bytes,wal_bytes,wal_fpi,fpi_bytes")


def row(strategy, clients=1, **over):
    base = {
        "strategy": strategy, "clients": clients, "rows": 1000, "seconds": 2.0, "rows_per_s": 500.0,
        "leaf_splits": 9, "upper_splits": 0, "new_roots": 2, "leaf_pages": 10, "avg_leaf_density": 90.0,
        "leaf_fragmentation": 0.0, "index_bytes": 100_000, "table_bytes": 200_000, "wal_bytes": 1_000_000,
        "wal_fpi": 10, "fpi_bytes": 81_920, "tree_level": 1, "batch": 100, "checkpoints": 4,
    }
    base.update(over)
    return base


def sample():
    rows = []
    for c in (1, 8):
        rows.append(row("bigserial", c))
        rows.append(row("uuid_v4", c, leaf_splits=14, leaf_pages=15, avg_leaf_density=70.0, leaf_fragmentation=50.0,
                        index_bytes=180_000, wal_bytes=1_500_000, wal_fpi=300, rows_per_s=250.0))
        rows.append(row("snowflake", c, rows_per_s=600.0))
    return rows


class CsvTest(unittest.TestCase):
    def test_header_starts_with_the_contracted_columns_in_order(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.csv")
            report.write_csv(sample(), path)
            with open(path) as f:
                first = f.readline().strip()
        self.assertTrue(first.startswith(HEADER + ","), first)

    def test_round_trip_keeps_types_and_values(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.csv")
            rows = sample()
            report.write_csv(rows, path)
            back = report.read_csv(path)
        self.assertEqual(back, rows)
        self.assertIsInstance(back[0]["leaf_splits"], int)
        self.assertIsInstance(back[0]["avg_leaf_density"], float)

    def test_an_unknown_or_missing_column_is_refused(self):
        bad = row("bigserial", surprise=1)
        with tempfile.TemporaryDirectory() as d, self.assertRaises(ValueError):
            report.write_csv([bad], os.path.join(d, "results.csv"))
        short = row("bigserial")
        del short["wal_fpi"]
        with tempfile.TemporaryDirectory() as d, self.assertRaisesRegex(ValueError, "wal_fpi"):
            report.write_csv([short], os.path.join(d, "results.csv"))


class RatiosTest(unittest.TestCase):
    def test_ratios_are_against_bigserial_at_the_same_client_count(self):
        rows = sample()
        rows[3]["index_bytes"] = 200_000  # bigserial, 8 clients
        r = report.ratios(rows)
        self.assertAlmostEqual(r[("uuid_v4", 1)]["index_bytes"], 1.8)
        self.assertAlmostEqual(r[("uuid_v4", 8)]["index_bytes"], 0.9)
        self.assertAlmostEqual(r[("uuid_v4", 1)]["rows_per_s"], 0.5)
        self.assertAlmostEqual(r[("bigserial", 8)]["wal_bytes"], 1.0)

    def test_no_baseline_no_ratio(self):
        self.assertEqual(report.ratios([row("uuid_v4")]), {})


class SanityTest(unittest.TestCase):
    def test_a_physically_plausible_run_passes(self):
        self.assertEqual(report.sanity(sample(), ["bigserial", "uuid_v4", "snowflake"], [1, 8]), [])

    def test_each_kind_of_impossible_figure_is_caught(self):
        rows = sample()
        rows[0]["leaf_splits"] = 0                      # bigserial/1: no splits, pages disagree
        rows[1]["avg_leaf_density"] = 95.0               # uuid_v4/1 denser than bigserial
        rows[4]["leaf_pages"] = 99                       # uuid_v4/8: pages disagree with splits
        del rows[5]                                      # snowflake/8 missing
        problems = report.sanity(rows, ["bigserial", "uuid_v4", "snowflake"], [1, 8])
        text = "\n".join(problems)
        self.assertIn("bigserial/1: no leaf split counted", text)
        self.assertIn("bigserial/1: 10 leaf pages after 0 leaf splits", text)
        self.assertIn("1 clients: uuid_v4 leaves are not less dense than bigserial's", text)
        self.assertIn("uuid_v4/8: 99 leaf pages after 14 leaf splits", text)
        self.assertIn("no row for snowflake with 8 clients", text)


class ReportTest(unittest.TestCase):
    META = {"rows": 1000, "batch": 100, "server": "PostgreSQL 15", "settings": "max_wal_size 8GB",
            "machine": "2 CPUs", "command": "benches/run --rows 1000"}

    def test_markdown_has_a_table_per_client_count_with_ratios_and_the_why(self):
        text = report.markdown(sample(), self.META)
        self.assertIn("## 1 client\n", text)
        self.assertIn("## 8 clients\n", text)
        self.assertIn("| uuid_v4 | 250 | 14 | 70.0 % | 50.0 % |", text)
        self.assertIn("| 1.80 | 1.50 | 0.50 |", text)  # index, WAL and speed against bigserial
        self.assertIn("ln 2", text)
        self.assertIn("full-page", text)
        self.assertIn("`benches/run --rows 1000`", text)
        self.assertIn("![", text)

    def test_the_several_backends_paragraph_comes_from_the_figures(self):
        rows = sample()
        for r in rows:
            if r["clients"] == 8 and r["strategy"] in ("bigserial", "snowflake"):
                r["avg_leaf_density"] = 80.0
                r["leaf_fragmentation"] = 12.5
        text = report.several_backends(rows)
        self.assertIn("With 8 clients", text)
        self.assertIn("80.0–80.0 % full with 12.5–12.5 % fragmentation", text)
        self.assertIn("against 90.0–90.0 % with 1", text)
        self.assertIn("snowflake 1.00×", text)
        self.assertIn("one client count", report.several_backends([row("bigserial")]))

    def test_write_all_makes_the_csv_the_report_and_a_png(self):
        with tempfile.TemporaryDirectory() as d:
            report.write_all(sample(), self.META, d)
            self.assertEqual(sorted(os.listdir(d)), ["report.md", "results.csv", "study.png"])
            with open(os.path.join(d, "study.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            self.assertGreater(os.path.getsize(os.path.join(d, "study.png")), 10_000)


if __name__ == "__main__":
    unittest.main()
