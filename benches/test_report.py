"""Tests of the study's CSV, report and chart code, without a server:
/usr/bin/python3 -m unittest discover -s benches -p 'test_*.py'"""
import os
import tempfile
import unittest

from idgen_harness import report

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
        "io_source": "pg_stat_io", "blks_extended_per_1k_rows": 0.2,
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
        self.assertIn("| uuid_v4 | core's `gen_random_uuid()` | 250 | 14 | 70.0 % | 50.0 % |", text)
        self.assertIn("| 1.80 | 1.50 | 0.50 |", text)  # index, WAL and speed against bigserial
        self.assertIn("ln 2", text)
        self.assertIn("full-page", text)
        self.assertIn("`benches/run --rows 1000`", text)
        self.assertIn("![", text)

    def test_each_strategy_is_labelled_with_what_made_its_keys(self):
        rows = sample() + [row("snowflake_instagram", c, rows_per_s=30.0) for c in (1, 8)]
        text = report.markdown(rows, self.META)
        self.assertIn("| snowflake | idgen's `snowflake_next()` (the extension, the server's `idgen.layout`) | 600 |",
                      text)
        # the plain-SQL edition's rows/s read as the edition's, not as a cost of the layout
        self.assertIn("| snowflake_instagram | the plain-SQL (PL/pgSQL) edition under layout instagram | 30 |", text)
        self.assertIn("snowflake_instagram: keys from the plain-SQL (PL/pgSQL) edition", text)
        self.assertIn("not a cost of the layout", text)
        self.assertNotIn("keys from the plain-SQL", report.markdown(sample(), self.META))
        # a strategy without a file (an old CSV, a strategy since renamed) still renders
        self.assertIn("| gone | — | 500 |", report.markdown(sample() + [row("gone")], self.META))

    def test_every_strategy_file_says_what_made_its_keys(self):
        made = report.made_by()
        self.assertIn("bigserial", made)
        self.assertEqual([s for s, m in made.items() if not m], [])
        self.assertEqual(report.plain_sql_edition(made), ["snowflake_instagram", "snowflake_js53"])

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
        self.assertIn("| uuid_v4 | 1 | 16,000 | 4.80 | 310.0 | 12.0 | 465.0 | 0.2 | 125 |", text)
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


def disorder_row(strategy="snowflake", window=40.0, clients=200, mitigation="none", **over):
    base = {
        "strategy": strategy, "mitigation": mitigation, "window_ms": window, "clients": clients, "fillfactor": 90,
        "rows": 20000, "batch": 10, "checkpoints": 0, "seconds": 7.0, "rows_per_s": 2800.0,
        "held_ms_mean": window + 1.0, "late_rows_pct": 90.0, "larger_before_mean": 86.5, "larger_before_p50": 40,
        "larger_before_p99": 640, "larger_before_max": 1500, "lateness_ms_p99": 180.0, "lateness_ms_max": 400.0,
        "leaf_splits": 96, "leaf_pages": 97, "avg_leaf_density": 57.4, "leaf_fragmentation": 46.5,
        "index_bytes": 800_000, "table_bytes": 1_500_000, "wal_bytes": 4_000_000, "wal_fpi": 0,
        "key_item_bytes": 20, "leaf_capacity": 407, "room_after_rightmost_split": 40, "model_leaf_pages": 97,
        "model_density": 57.3, "model_fragmentation": 46.5, "model_rightmost_splits": 50, "model_5050_splits": 46,
        "late_keys_p50": 80, "late_keys_p90": 92, "late_keys_max": 120, "broken_splits_pct": 89.0,
        "reindex_seconds": None, "reindex_wal_bytes": None, "density_after_reindex": None,
        "fragmentation_after_reindex": None, "index_bytes_after_reindex": None,
    }
    base.update(over)
    return base


def disorder_sample():
    return [
        disorder_row(window=0.0, held_ms_mean=0.0, avg_leaf_density=89.5, model_density=88.0, leaf_fragmentation=0.0,
                     model_fragmentation=0.0, leaf_pages=55, leaf_splits=54),
        disorder_row(reindex_seconds=0.2, reindex_wal_bytes=500_000, density_after_reindex=89.5,
                     fragmentation_after_reindex=0.0, index_bytes_after_reindex=520_000),
        disorder_row(mitigation="fillfactor 70", fillfactor=70, avg_leaf_density=78.2, leaf_fragmentation=0.0,
                     model_density=78.0, model_fragmentation=0.0, index_bytes=600_000, rows_per_s=2700.0),
    ]


class DisorderTest(unittest.TestCase):
    def test_round_trip_keeps_types_values_and_empty_cells(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "disorder.csv")
            report.write_disorder_csv(disorder_sample(), path)
            back = report.read_disorder_csv(path)
        self.assertEqual(back, disorder_sample())
        self.assertIsNone(back[0]["reindex_seconds"])
        self.assertIsInstance(back[1]["reindex_wal_bytes"], int)

    def test_a_row_without_a_measure_is_refused(self):
        bad = disorder_row()
        del bad["late_keys_p90"]
        with tempfile.TemporaryDirectory() as d, self.assertRaises(ValueError):
            report.write_disorder_csv([bad], os.path.join(d, "disorder.csv"))

    def test_the_report_shows_the_curve_the_mitigations_against_the_unmitigated_run_and_why(self):
        meta = {"rows": 20000, "batch": 10, "server": "PostgreSQL 15", "machine": "2 CPUs", "command": "benches/run"}
        text = report.disorder_markdown(disorder_sample(), meta, [{"key": "uuid_v7", "clients": "64",
                                                                  "density": "64.7 %", "fragmentation": "35.4 %"}])
        self.assertIn("## The curve: 200 clients, fillfactor 90", text)
        self.assertIn("| snowflake | 40 | 41.0 | 90.0 % | 86.5 / 640 / 1,500 | 180.0 | 80 / 92 (97; 40) | 89 % "
                      "| 57.4 % (57.3 %) | 46.5 % (46.5 %) |", text)
        # fillfactor 70: index 600,000 / 800,000 bytes, rows/s 2,700 / 2,800
        self.assertIn("| snowflake | fillfactor 70 | 200 | 78.2 % | 0.0 % | 0.6 | 3.8 | 2,700 | 0.75 | 1.00 | 0.96 |",
                      text)
        self.assertIn("| snowflake | REINDEX CONCURRENTLY after | 200 | 89.5 % | 0.0 % | 0.5 | +0.5 in 0.2 s", text)
        self.assertIn("| uuid_v7 | 64 | 64.7 % | 35.4 % |", text)
        self.assertIn("within 1.5 points of pgstatindex's in 3 of 3 runs", text)
        self.assertIn("| snowflake | 0 | 0.0 | 90.0 % | 86.5 / 640 / 1,500 | 180.0 | 80 / 92 (—; 40) |", text)
        self.assertIn("at 111 writers for 8-byte keys and 81 for UUIDs at fillfactor 90", text)
        missed = report.disorder_markdown([disorder_row(model_density=68.0)], meta)
        self.assertIn("| 57.4 % (68.0 %) ‡ |", missed)
        self.assertIn("in 0 of 1 runs; ‡ marks the 1 where it misses by more than 2 points (at most 10.6)", missed)
        self.assertIn("room is smaller — 29 against 40 at fillfactor 90", text)

    def test_sanity_catches_a_split_count_that_disagrees_and_a_wait_that_did_not_happen(self):
        self.assertEqual(report.disorder_sanity(disorder_sample()), [])
        problems = report.disorder_sanity([disorder_row(leaf_pages=90), disorder_row(held_ms_mean=3.0)])
        self.assertEqual(len(problems), 2, problems)
        self.assertIn("90 leaf pages after 96 leaf splits", problems[0])
        self.assertIn("held 3.00 ms on average", problems[1])

    def test_the_chart_is_drawn(self):
        with tempfile.TemporaryDirectory() as d:
            report.write_disorder(disorder_sample(), {"rows": 20000, "batch": 10, "server": "s", "machine": "m",
                                                      "command": "c"}, d)
            self.assertGreater(os.path.getsize(os.path.join(d, "disorder.png")), 10_000)
            self.assertTrue(os.path.exists(os.path.join(d, "disorder.md")))


class ExtendedTest(unittest.TestCase):
    def test_a_csv_from_before_the_extended_column_reads_and_renders_it_as_a_dash(self):
        rows = sample()
        for r in rows:
            del r["blks_extended_per_1k_rows"]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.csv")
            with open(path, "w", newline="") as f:
                w = report.csv.DictWriter(f, fieldnames=[c for c in report.COLUMNS if c != "blks_extended_per_1k_rows"])
                w.writeheader()
                w.writerows(rows)
            back = report.read_csv(path)
        self.assertIsNone(back[0]["blks_extended_per_1k_rows"])
        self.assertIn("| 0.5 | 12.0 | 0.0 | — | 500 |", "\n".join(report.io_section(back)))
        self.assertEqual(report.sanity(back, ["bigserial", "uuid_v4", "snowflake"], [1, 8]), [])


class WritersTest(unittest.TestCase):
    def test_one_window_and_several_writer_counts_get_the_writers_table_and_chart(self):
        rows = [disorder_row(window=10.0, clients=c, strategy=s, key_item_bytes=item,
                             room_after_rightmost_split=room, late_keys_p50=late)
                for s, item, room in (("snowflake", 20, 40), ("uuid_v7", 28, 29))
                for c, late in ((64, 15), (112, 40), (160, 60))]
        text = report.disorder_markdown(rows, {"rows": 20000, "batch": 10, "server": "s", "machine": "m",
                                               "command": "c"})
        self.assertIn("## Writers at once, at 10 ms", text)
        self.assertIn("| snowflake | 64 | 15 (16) | 40 | 89 % | 57.4 % | 46.5 % | 111 writers |", text)
        self.assertIn("| uuid_v7 | 160 | 60 (80) | 29 |", text)
        self.assertIn("| uuid_v7 | 64 | 15 (20) | 29 | 89 % | 57.4 % | 46.5 % | 81 writers |", text)
        with tempfile.TemporaryDirectory() as d:
            report.disorder_chart(rows, os.path.join(d, "w.png"))
            self.assertGreater(os.path.getsize(os.path.join(d, "w.png")), 10_000)
