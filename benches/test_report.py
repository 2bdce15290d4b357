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
        "blks_read_per_1k_rows": 0.5, "blks_written_per_1k_rows": 12.0, "blks_evicted_per_1k_rows": 0.0,
        "index_to_shared_buffers": 0.1, "shared_buffers_bytes": 1_000_000,
        "io_source": "pg_stat_io",
    }
    base.update(over)
    return base


def sample():
    rows = []
    for c in (1, 8):
        rows.append(row("bigserial", c))
        rows.append(row("uuid_v4", c, leaf_splits=14, leaf_pages=15, avg_leaf_density=70.0, leaf_fragmentation=50.0,
                        index_bytes=180_000, wal_bytes=1_500_000, wal_fpi=300, rows_per_s=250.0,
                        index_to_shared_buffers=0.18))
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
        self.assertAlmostEqual(r[("uuid_v4", 1, 1000)]["index_bytes"], 1.8)
        self.assertAlmostEqual(r[("uuid_v4", 8, 1000)]["index_bytes"], 0.9)
        self.assertAlmostEqual(r[("uuid_v4", 1, 1000)]["rows_per_s"], 0.5)
        self.assertAlmostEqual(r[("bigserial", 8, 1000)]["wal_bytes"], 1.0)

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
            self.assertEqual(sorted(os.listdir(d)), ["report.md", "results.csv", "study.png", "study_io.png"])
            with open(os.path.join(d, "study.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            self.assertGreater(os.path.getsize(os.path.join(d, "study.png")), 10_000)



def curve():
    """Three sizes: uuid_v4's reads jump once its index passes shared_buffers; bigserial's stay flat."""
    rows = []
    for n, ratio_v4, ratio_serial, reads_v4 in ((1000, 0.3, 0.2, 0.4), (4000, 1.2, 0.8, 2.0), (16000, 4.8, 3.2, 310.0)):
        rows.append(row("bigserial", rows=n, index_bytes=int(ratio_serial * 1_000_000),
                        blks_read_per_1k_rows=0.3, blks_evicted_per_1k_rows=1.0, rows_per_s=500.0))
        rows.append(row("uuid_v4", rows=n, index_bytes=int(ratio_v4 * 1_000_000),
                        leaf_splits=14, leaf_pages=15, avg_leaf_density=70.0, leaf_fragmentation=50.0,
                        wal_fpi=300, blks_read_per_1k_rows=reads_v4, blks_evicted_per_1k_rows=reads_v4 * 1.5,
                        rows_per_s=500.0 if n < 16000 else 125.0))
    for r in rows:
        r["index_to_shared_buffers"] = r["index_bytes"] / r["shared_buffers_bytes"]
    return rows


class IoCurveTest(unittest.TestCase):
    def test_old_results_without_io_columns_still_read_and_render(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.csv")
            with open(path, "w") as f:
                f.write(HEADER + ",tree_level,batch,checkpoints\n"
                        "bigserial,1,1000,2,500,9,0,2,10,90,0,100000,200000,1000000,10,81920,1,100,4\n")
            rows = report.read_csv(path)
            self.assertIsNone(rows[0]["blks_read_per_1k_rows"])
            self.assertFalse(report.has_io(rows))
            report.write_all(rows, ReportTest.META, d)
            self.assertNotIn("study_io.png", os.listdir(d))
            self.assertEqual(report.read_csv(path)[0]["rows"], 1000)

    def test_the_paragraph_states_where_each_curve_bends(self):
        text = report.io_curve(curve())
        self.assertIn("**bigserial**, 1 client: flat — 0.3 to 0.3 blocks read per 1,000 rows", text)
        self.assertIn("**uuid_v4**, 1 client: bends between 1.20 and 4.80 × shared_buffers: blocks read per "
                      "1,000 rows 2.0 → 310.0", text)
        self.assertIn("rows/s × 0.25", text)
        self.assertIn("--sizes", report.io_curve(sample()))

    def test_the_report_has_the_io_table_and_the_second_chart(self):
        rows = curve()
        text = report.markdown(rows, {**ReportTest.META, "sizes": [1000, 4000, 16000]})
        self.assertIn("## 1 client, 16,000 rows", text)
        self.assertIn("## Buffer I/O as the index grows", text)
        self.assertIn("| uuid_v4 | 1 | 16,000 | 4.80 | 310.0 | 12.0 | 465.0 | 125 |", text)
        self.assertIn("![buffer I/O per 1,000 rows against index size / shared_buffers](study_io.png)", text)
        with tempfile.TemporaryDirectory() as d:
            report.io_chart(rows, os.path.join(d, "io.png"))
            with open(os.path.join(d, "io.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_sanity_of_the_io_columns(self):
        self.assertEqual(report.sanity(curve(), ["bigserial", "uuid_v4"], [1]), [])
        rows = curve()
        rows[5]["blks_read_per_1k_rows"] = 0.1           # uuid_v4 at 4.8 x: reads no more than bigserial
        rows[0]["blks_written_per_1k_rows"] = -1.0       # a negative count
        rows[2]["index_to_shared_buffers"] = 9.0         # does not add up
        text = "\n".join(report.sanity(rows, ["bigserial", "uuid_v4"], [1]))
        self.assertIn("uuid_v4's blks_read_per_1k_rows (0.1) is not above bigserial's", text)
        self.assertIn("bigserial/1/1000: blks_written_per_1k_rows is negative", text)
        self.assertIn("bigserial/1/4000: index_to_shared_buffers 9.0 is not index_bytes / shared_buffers", text)


if __name__ == "__main__":
    unittest.main()
