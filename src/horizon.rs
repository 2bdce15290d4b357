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

const MAGIC: &str = "idgen-horizon-v1";

#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    /// The file exists but does not hold a horizon: do not guess, a wrong guess can reissue ids.
    Corrupt(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Corrupt(text) => write!(f, "unexpected contents {text:?}"),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("idgen-horizon-test-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir.join("idgen_horizon")
    }

    #[test]
    fn a_missing_file_is_a_new_cluster() {
        assert!(matches!(read(&scratch("missing")), Ok(None)));
    }

    #[test]
    fn write_then_read_round_trips_and_overwrites() {
        let path = scratch("roundtrip");
        write(&path, 1_767_225_600_000).unwrap();
        assert_eq!(read(&path).unwrap(), Some(1_767_225_600_000));
        write(&path, 42).unwrap();
        assert_eq!(read(&path).unwrap(), Some(42));
        assert!(!path.with_extension("tmp").exists());
    }

    #[test]
    fn a_damaged_file_is_refused_not_guessed() {
        let path = scratch("corrupt");
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
}
