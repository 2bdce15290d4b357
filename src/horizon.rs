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

use crate::snowflake::{MAX_EPOCH_UNIX_MS, MAX_MILLIS};

const MAGIC: &str = "idgen-horizon-v1";

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

/// The recorded horizon, or None when there is no file yet (a new cluster).
pub fn read(path: &Path) -> Result<Option<u64>, ReadError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReadError::Io(e)),
    };
    let mut words = text.split_whitespace();
    match (
        words.next(),
        words.next().map(str::parse::<u64>),
        words.next(),
    ) {
        (Some(MAGIC), Some(Ok(ms)), None) if ms > MAX_UNIX_MS => Err(ReadError::OutOfRange(ms)),
        (Some(MAGIC), Some(Ok(ms)), None) => Ok(Some(ms)),
        _ => Err(ReadError::Corrupt(text.chars().take(80).collect())),
    }
}

/// Writes the horizon atomically and durably: a temporary file, fsync, rename over the old one,
/// fsync of the directory. A crash at any point leaves either the old or the new value.
pub fn write(path: &Path, unix_ms: u64) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        writeln!(file, "{MAGIC} {unix_ms}")?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// The WAL record of a new horizon (PostgreSQL 15 and later, see `wal.rs`): what a standby, a
/// crash recovery or a point-in-time restore replays to learn how far the primary may have
/// issued ids. The horizon is Unix ms, so it orders ids of any worker id and any epoch; the
/// worker id and epoch are carried for the record's description only. Little-endian, fixed
/// size, with a format version first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub horizon_unix_ms: u64,
    pub epoch_unix_ms: u64,
    /// -1 when unset.
    pub worker_id: i32,
}

const RECORD_VERSION: u8 = 1;
pub const RECORD_LEN: usize = 1 + 8 + 8 + 4;

impl Record {
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut out = [0u8; RECORD_LEN];
        out[0] = RECORD_VERSION;
        out[1..9].copy_from_slice(&self.horizon_unix_ms.to_le_bytes());
        out[9..17].copy_from_slice(&self.epoch_unix_ms.to_le_bytes());
        out[17..21].copy_from_slice(&self.worker_id.to_le_bytes());
        out
    }

    /// None for anything this version did not write: replay must not guess a horizon.
    pub fn decode(bytes: &[u8]) -> Option<Record> {
        if bytes.len() != RECORD_LEN || bytes[0] != RECORD_VERSION {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Some(Record {
            horizon_unix_ms: u64_at(1),
            epoch_unix_ms: u64_at(9),
            worker_id: i32::from_le_bytes(bytes[17..21].try_into().expect("4 bytes")),
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
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_other_formats() {
        let r = Record {
            horizon_unix_ms: 1_767_225_600_123,
            epoch_unix_ms: 1_288_834_974_657,
            worker_id: -1,
        };
        let bytes = r.encode();
        assert_eq!(Record::decode(&bytes), Some(r));
        assert_eq!(Record::decode(&bytes[..RECORD_LEN - 1]), None);
        let mut other = bytes;
        other[0] = 2;
        assert_eq!(Record::decode(&other), None);
        assert_eq!(
            r.to_string(),
            "horizon 1767225600123 (Unix ms); worker_id -1; epoch 1288834974657 (Unix ms)"
        );
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
    fn a_missing_file_is_a_new_cluster() {
        let (_dir, path) = scratch();
        assert!(matches!(read(&path), Ok(None)));
    }

    #[test]
    fn write_then_read_round_trips_and_overwrites() {
        let (_dir, path) = scratch();
        write(&path, 1_767_225_600_000).unwrap();
        assert_eq!(read(&path).unwrap(), Some(1_767_225_600_000));
        write(&path, 42).unwrap();
        assert_eq!(read(&path).unwrap(), Some(42));
        assert!(!path.with_extension("tmp").exists());
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
        assert_eq!(read(&path).unwrap(), Some(MAX_UNIX_MS));
        assert_eq!(MAX_UNIX_MS, 4_346_506_902_551);
    }
}
