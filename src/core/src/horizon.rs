//! The persisted high-water mark of the snowflake generator: a tiny text file under PGDATA.
//!
//! It holds one Unix millisecond. While the server runs, no id is issued from a later
//! millisecond than the one on disk (the generator pushes it ahead, `HORIZON_LEAD_MS` at a time,
//! and waits for the fsync before using the new room). A clean shutdown records the exact last
//! millisecond issued. At start-up the generator resumes strictly after the recorded value, so a
//! restart or crash recovery never reissues an id, even when the clock was set back meanwhile.
//!
//! Pure Rust: the Postgres layer only chooses the path (inside the data directory).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::layout::Layout;
use crate::snowflake::{MAX_EPOCH_UNIX_MS, MAX_MILLIS};

const MAGIC: &str = "idgen-horizon-v1";

/// The file's name, in the data directory.
pub const FILE: &str = "idgen_horizon";

/// How far past a replayed horizon the file may be written while replay is catching up (see
/// `replay_mark`): ten minutes of the primary's time per file write.
pub const REPLAY_STRIDE_MS: u64 = 600_000;

/// What a replaying server writes into the file for a replayed horizon, if anything.
///
/// The file must never hold less than a horizon replayed before the last restartpoint: a
/// restart resumes replay there and would not see that record again. It is written and
/// fsynced before redo returns, so that holds whenever a restartpoint is made — PostgreSQL
/// gives an extension no hook to write it at the restartpoint instead.
///
/// Writing it for every record costs two fsyncs in the startup process, serially: nothing while
/// a standby follows its primary (two records a second), but hours in a point-in-time restore
/// that replays days of them at full speed. So:
/// - a record at or below what the file holds writes nothing (most records of a catch-up);
/// - otherwise the file gets the replayed horizon plus up to `REPLAY_STRIDE_MS`, but never more
///   than this server's clock: a value above the truth is safe (the file is a bound, and a
///   restart resumes past it), and one at or below the clock costs no wait after a restart, so
///   a restore writes the file once per ten minutes of replayed time while a standby that keeps
///   up writes exactly what it replayed, as before.
pub fn replay_mark(replayed_unix_ms: u64, on_disk_unix_ms: u64, now_unix_ms: u64) -> Option<u64> {
    if replayed_unix_ms <= on_disk_unix_ms {
        return None;
    }
    let ahead = (replayed_unix_ms + REPLAY_STRIDE_MS).min(now_unix_ms);
    Some(ahead.max(replayed_unix_ms))
}

#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    /// The file exists but does not hold a horizon: do not guess, a wrong guess can reissue ids.
    Corrupt(String),
    /// A horizon later than any snowflake id can be: typed in wrong (microseconds, say, while
    /// following the repair HINT), it would stop the generator for millennia.
    OutOfRange(u64),
}

/// The latest Unix millisecond any snowflake id can carry: the latest epoch plus 2^41 - 1 ms
/// (2107-09-26). A real horizon is the clock plus a second, far below it.
pub const MAX_UNIX_MS: u64 = MAX_EPOCH_UNIX_MS + MAX_MILLIS;

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Corrupt(text) => write!(f, "unexpected contents {text:?}"),
            Self::OutOfRange(ms) => write!(
                f,
                "horizon {ms} is later than any snowflake id can be (at most {MAX_UNIX_MS}, 2107-09-26): the file holds Unix milliseconds (13 digits), not microseconds or nanoseconds"
            ),
        }
    }
}

/// What the file holds: the horizon; the id space the ids up to it were made under, its layout
/// (Twitter's unless the file says otherwise: every file before 0.3.0 was written under it) and
/// its epoch; and when this server replayed the WAL of a primary
/// whose `idgen.epoch` or `idgen.layout` differs from its own, that primary's. Ids on another
/// epoch or layout would sort wrongly against the primary's, so the generator refuses until the
/// setting matches; the conflict is kept in the file so that a restart does not forget it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub unix_ms: u64,
    pub layout: Layout,
    /// The `idgen.epoch` the ids up to the horizon were made under. None in a file written
    /// before 0.3.0 (or by hand, as the repair HINT says): taken as the server's own, the only
    /// thing such a file can mean if the setting did not change; the next write records it.
    pub epoch_ms: Option<u64>,
    pub primary_epoch_ms: Option<u64>,
    pub primary_layout: Option<Layout>,
}

impl Mark {
    pub fn at(unix_ms: u64) -> Mark {
        Mark {
            unix_ms,
            layout: Layout::TWITTER,
            epoch_ms: None,
            primary_epoch_ms: None,
            primary_layout: None,
        }
    }
}

const EPOCH: &str = "epoch=";
const PRIMARY_EPOCH: &str = "primary-epoch=";
const LAYOUT: &str = "layout=";
const PRIMARY_LAYOUT: &str = "primary-layout=";

/// The recorded horizon, or None when there is no file yet (a new cluster).
pub fn read(path: &Path) -> Result<Option<Mark>, ReadError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReadError::Io(e)),
    };
    let corrupt = || ReadError::Corrupt(text.chars().take(80).collect());
    let mut words = text.split_whitespace();
    let (Some(MAGIC), Some(Ok(ms))) = (words.next(), words.next().map(str::parse::<u64>)) else {
        return Err(corrupt());
    };
    let mut mark = Mark::at(ms);
    // each of the optional words at most once, in the order `write` puts them
    let mut next = words.next();
    if let Some(word) = next.and_then(|w| w.strip_prefix(LAYOUT)) {
        mark.layout = Layout::parse(word).map_err(|_| corrupt())?;
        next = words.next();
    }
    if let Some(word) = next.and_then(|w| w.strip_prefix(EPOCH)) {
        mark.epoch_ms = Some(word.parse::<u64>().map_err(|_| corrupt())?);
        next = words.next();
    }
    if let Some(word) = next.and_then(|w| w.strip_prefix(PRIMARY_EPOCH)) {
        mark.primary_epoch_ms = Some(word.parse::<u64>().map_err(|_| corrupt())?);
        next = words.next();
    }
    if let Some(word) = next.and_then(|w| w.strip_prefix(PRIMARY_LAYOUT)) {
        mark.primary_layout = Some(Layout::parse(word).map_err(|_| corrupt())?);
        next = words.next();
    }
    if next.is_some() {
        return Err(corrupt());
    }
    if ms > MAX_UNIX_MS {
        return Err(ReadError::OutOfRange(ms));
    }
    Ok(Some(mark))
}

/// Writes the horizon atomically and durably: a temporary file, fsync, rename over the old one,
/// fsync of the directory. A crash at any point leaves either the old or the new value.
pub fn write(path: &Path, mark: Mark) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        write!(file, "{MAGIC} {}", mark.unix_ms)?;
        if mark.layout != Layout::TWITTER {
            write!(file, " {LAYOUT}{}", mark.layout)?;
        }
        if let Some(epoch) = mark.epoch_ms {
            write!(file, " {EPOCH}{epoch}")?;
        }
        if let Some(epoch) = mark.primary_epoch_ms {
            write!(file, " {PRIMARY_EPOCH}{epoch}")?;
        }
        if let Some(layout) = mark.primary_layout {
            write!(file, " {PRIMARY_LAYOUT}{layout}")?;
        }
        writeln!(file)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    File::open(folder_of(path))?.sync_all()
}

/// The folder whose entry for `path` a rename changes, to be synced after it: the current
/// folder for a bare file name (the server names its file relative to the data directory).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The WAL record of a new horizon (PostgreSQL 15 and later, see `wal.rs`): what a standby, a
/// crash recovery or a point-in-time restore replays to learn how far the primary may have
/// issued ids. The horizon is Unix ms, so it bounds ids of any worker id and any epoch; replay
/// compares the record's epoch and worker id with the replaying server's own (see
/// `horizon_store.rs`). Little-endian, fixed size, with a format version first: version 1 (21
/// bytes) for Twitter's layout, as every record before 0.3.0 was; version 2 (25 bytes, the
/// layout's 4-byte code last) for any other, so that a standby of an earlier build still
/// replays a Twitter primary's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub horizon_unix_ms: u64,
    pub epoch_unix_ms: u64,
    /// -1 when unset.
    pub worker_id: i32,
    pub layout: Layout,
}

pub const RECORD_LEN: usize = 1 + 8 + 8 + 4;
pub const RECORD_V2_LEN: usize = RECORD_LEN + 4;

impl Record {
    /// The record's bytes: `RECORD_LEN` of them for Twitter's layout, `RECORD_V2_LEN` else.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RECORD_V2_LEN);
        let v1 = self.layout == Layout::TWITTER;
        out.push(if v1 { 1 } else { 2 });
        out.extend_from_slice(&self.horizon_unix_ms.to_le_bytes());
        out.extend_from_slice(&self.epoch_unix_ms.to_le_bytes());
        out.extend_from_slice(&self.worker_id.to_le_bytes());
        if !v1 {
            out.extend_from_slice(&self.layout.to_code().to_le_bytes());
        }
        out
    }

    /// None for anything this version did not write: replay must not guess a horizon.
    pub fn decode(bytes: &[u8]) -> Option<Record> {
        let layout = match (bytes.first(), bytes.len()) {
            (Some(1), RECORD_LEN) => Layout::TWITTER,
            (Some(2), RECORD_V2_LEN) => {
                let code = u32::from_le_bytes(bytes[21..25].try_into().expect("4 bytes"));
                Layout::from_code(code).filter(|l| *l != Layout::TWITTER)?
            }
            _ => return None,
        };
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Some(Record {
            horizon_unix_ms: u64_at(1),
            epoch_unix_ms: u64_at(9),
            worker_id: i32::from_le_bytes(bytes[17..21].try_into().expect("4 bytes")),
            layout,
        })
    }
}

impl std::fmt::Display for Record {
    /// What pg_walinspect and pg_waldump show.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "horizon {} (Unix ms); worker_id {}; epoch {} (Unix ms)",
            self.horizon_unix_ms, self.worker_id, self.epoch_unix_ms
        )?;
        if self.layout != Layout::TWITTER {
            write!(f, "; layout {}", self.layout)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The file never falls below a replayed horizon, and never runs ahead of the clock
        /// unless the replayed horizon itself does.
        #[test]
        fn a_replayed_mark_covers_the_record_and_stays_within_the_clock(
            replayed in 0..MAX_UNIX_MS, on_disk in 0..MAX_UNIX_MS, now in 0..MAX_UNIX_MS,
        ) {
            match replay_mark(replayed, on_disk, now) {
                None => prop_assert!(replayed <= on_disk),
                Some(w) => {
                    prop_assert!(replayed > on_disk);
                    prop_assert!(w >= replayed);
                    prop_assert!(w <= replayed.max(now));
                    prop_assert!(w <= replayed + REPLAY_STRIDE_MS);
                }
            }
        }
    }

    #[test]
    fn a_catch_up_writes_the_file_once_per_stride_and_a_live_standby_every_record() {
        const T0: u64 = 1_767_225_600_000;
        // A restore a week behind the clock: records every 500 ms of the primary's time.
        let now = T0 + 7 * 86_400_000;
        let mut on_disk = 0;
        let mut writes = 0;
        for i in 0..(3_600_000 / 500) {
            if let Some(w) = replay_mark(T0 + i * 500, on_disk, now) {
                on_disk = w;
                writes += 1;
            }
        }
        assert_eq!(writes, 6, "one hour of records, one write per ten minutes");
        // A standby that keeps up: its clock is at the records (or behind them).
        let mut on_disk = 0;
        let mut writes = 0;
        for i in 1..=100 {
            let replayed = T0 + i * 500 + 1_000;
            if let Some(w) = replay_mark(replayed, on_disk, T0 + i * 500) {
                assert_eq!(
                    w, replayed,
                    "exactly what it replayed: no wait after a restart"
                );
                on_disk = w;
                writes += 1;
            }
        }
        assert_eq!(writes, 100);
    }

    #[test]
    fn records_round_trip_and_refuse_other_formats() {
        let r = Record {
            horizon_unix_ms: 1_767_225_600_123,
            epoch_unix_ms: 1_288_834_974_657,
            worker_id: -1,
            layout: Layout::TWITTER,
        };
        let bytes = r.encode();
        assert_eq!(Record::decode(&bytes), Some(r));
        assert_eq!(Record::decode(&bytes[..RECORD_LEN - 1]), None);
        let mut other = bytes.clone();
        other[0] = 2;
        assert_eq!(Record::decode(&other), None, "version 2 is longer");
        other[0] = 3;
        assert_eq!(Record::decode(&other), None);
        assert_eq!(
            r.to_string(),
            "horizon 1767225600123 (Unix ms); worker_id -1; epoch 1288834974657 (Unix ms)"
        );
        let sony = Record {
            layout: Layout::SONYFLAKE,
            ..r
        };
        let bytes = sony.encode();
        assert_eq!((bytes.len(), bytes[0]), (RECORD_V2_LEN, 2));
        assert_eq!(Record::decode(&bytes), Some(sony));
        assert!(sony.to_string().ends_with("; layout sonyflake"));
        // a version 2 record never names Twitter's layout, nor a code that is no layout
        let mut twitter_v2 = bytes.clone();
        twitter_v2[21..25].copy_from_slice(&Layout::TWITTER.to_code().to_le_bytes());
        assert_eq!(Record::decode(&twitter_v2), None);
        let mut nonsense = bytes;
        nonsense[21..25].copy_from_slice(&[0xff; 4]);
        assert_eq!(Record::decode(&nonsense), None);
    }

    /// A fresh folder (removed when the returned guard drops) and the horizon file's path in it.
    fn scratch() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix("idgen-horizon-test-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("idgen_horizon");
        (dir, path)
    }

    #[test]
    fn a_record_is_the_21_bytes_its_format_names() {
        // The WAL record is read back by every standby and restore of any later build: its bytes
        // are a format, not a detail (version 1, then three little-endian fields).
        let record = Record {
            horizon_unix_ms: 0x0102_0304_0506_0708,
            epoch_unix_ms: 0x1112_1314_1516_1718,
            worker_id: -2,
            layout: Layout::TWITTER,
        };
        let bytes = record.encode();
        assert_eq!(RECORD_LEN, 21);
        assert_eq!(
            bytes,
            [
                1, 8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, 0xfe,
                0xff, 0xff, 0xff
            ]
        );
        // version 2: the same, then the layout's code (js53: 38/7/8 in 10-ms units)
        let js = Record {
            layout: Layout::JS53,
            ..record
        }
        .encode();
        assert_eq!(RECORD_V2_LEN, 25);
        assert_eq!(js[0], 2);
        assert_eq!(js[1..21], bytes[1..21]);
        assert_eq!(js[21..25], [2, 8, 7, 38]);
    }

    #[test]
    fn the_folder_synced_after_a_write_is_the_files_own() {
        assert_eq!(
            folder_of(Path::new("/data/pg/idgen_horizon")),
            Path::new("/data/pg")
        );
        assert_eq!(folder_of(Path::new("idgen_horizon")), Path::new("."));
        assert_eq!(folder_of(Path::new("sub/idgen_horizon")), Path::new("sub"));
    }

    #[test]
    fn a_file_that_cannot_be_read_is_an_error_not_a_new_cluster() {
        // Only a missing file means a new cluster; one the server cannot read (here a folder in
        // its place) must stop snowflake_next(), not let it start from nothing.
        let (_dir, path) = scratch();
        std::fs::create_dir(&path).unwrap();
        assert!(matches!(read(&path), Err(ReadError::Io(_))));
    }

    #[test]
    fn a_missing_file_is_a_new_cluster() {
        let (_dir, path) = scratch();
        assert!(matches!(read(&path), Ok(None)));
    }

    #[test]
    fn write_then_read_round_trips_and_overwrites() {
        let (_dir, path) = scratch();
        write(&path, Mark::at(1_767_225_600_000)).unwrap();
        assert_eq!(read(&path).unwrap(), Some(Mark::at(1_767_225_600_000)));
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "idgen-horizon-v1 1767225600000\n",
            "the 0.1.0 format, unchanged without a conflict"
        );
        write(&path, Mark::at(42)).unwrap();
        assert_eq!(read(&path).unwrap(), Some(Mark::at(42)));
        assert!(!path.with_extension("tmp").exists());
        let conflict = Mark {
            primary_epoch_ms: Some(1_288_834_974_657),
            ..Mark::at(1_767_225_600_000)
        };
        write(&path, conflict).unwrap();
        assert_eq!(read(&path).unwrap(), Some(conflict));
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "idgen-horizon-v1 1767225600000 primary-epoch=1288834974657\n"
        );
        let layouts = Mark {
            layout: Layout::parse("40/12/11/10ms").unwrap(),
            primary_layout: Some(Layout::SONYFLAKE),
            ..conflict
        };
        write(&path, layouts).unwrap();
        assert_eq!(read(&path).unwrap(), Some(layouts));
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "idgen-horizon-v1 1767225600000 layout=40/12/11/10ms primary-epoch=1288834974657 \
             primary-layout=sonyflake\n"
        );
        // the id space whole: the epoch beside the layout
        let space = Mark {
            epoch_ms: Some(1_314_220_021_721),
            ..layouts
        };
        write(&path, space).unwrap();
        assert_eq!(read(&path).unwrap(), Some(space));
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "idgen-horizon-v1 1767225600000 layout=40/12/11/10ms epoch=1314220021721 \
             primary-epoch=1288834974657 primary-layout=sonyflake\n"
        );
        fs::write(
            &path,
            "idgen-horizon-v1 1767225600000 epoch=1288834974657\n",
        )
        .unwrap();
        assert_eq!(
            read(&path).unwrap(),
            Some(Mark {
                epoch_ms: Some(1_288_834_974_657),
                ..Mark::at(1_767_225_600_000)
            })
        );
    }

    #[test]
    fn a_damaged_file_is_refused_not_guessed() {
        let (_dir, path) = scratch();
        for text in [
            "",
            "idgen-horizon-v1",
            "idgen-horizon-v1 12x",
            "something 12",
            "idgen-horizon-v1 1 2",
            "idgen-horizon-v1 1 primary-epoch=",
            "idgen-horizon-v1 1 primary-epoch=x",
            "idgen-horizon-v1 1 primary-epoch=5 6",
            "idgen-horizon-v1 1 layout=",
            "idgen-horizon-v1 1 layout=42/11/12",
            "idgen-horizon-v1 1 primary-epoch=5 layout=js53",
            "idgen-horizon-v1 1 layout=js53 layout=js53",
            "idgen-horizon-v1 1 primary-layout=nonsense",
            "idgen-horizon-v1 1 epoch=",
            "idgen-horizon-v1 1 epoch=-5",
            "idgen-horizon-v1 1 epoch=5 layout=js53",
            "idgen-horizon-v1 1 epoch=5 epoch=5",
        ] {
            fs::write(&path, text).unwrap();
            assert!(
                matches!(read(&path), Err(ReadError::Corrupt(_))),
                "{text:?} was accepted"
            );
        }
    }

    #[test]
    fn a_horizon_no_snowflake_id_can_reach_is_refused_with_the_unit_named() {
        let (_dir, path) = scratch();
        // today in microseconds, as a hurried repair might type it
        fs::write(&path, "idgen-horizon-v1 1767225600000000\n").unwrap();
        let e = read(&path).unwrap_err();
        assert!(
            matches!(e, ReadError::OutOfRange(1_767_225_600_000_000)),
            "{e:?}"
        );
        assert!(e.to_string().contains("not microseconds"), "{e}");
        fs::write(&path, format!("idgen-horizon-v1 {}\n", MAX_UNIX_MS + 1)).unwrap();
        assert!(matches!(read(&path), Err(ReadError::OutOfRange(_))));
        fs::write(&path, format!("idgen-horizon-v1 {MAX_UNIX_MS}\n")).unwrap();
        assert_eq!(read(&path).unwrap(), Some(Mark::at(MAX_UNIX_MS)));
        assert_eq!(MAX_UNIX_MS, 4_346_506_902_551);
    }
}
