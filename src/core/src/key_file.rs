//! The base62 key file: where the passphrase of the keyed base62 functions lives since 0.3.0.
//!
//! Until 0.2.0 the passphrase was the setting `idgen.base62_key`. PostgreSQL shows every setting,
//! SUPERUSER_ONLY ones too, to members of `pg_read_all_settings`, and `pg_monitor` (the role
//! monitoring agents are given) is one of them: the key reached every monitoring agent. A file
//! readable only by the server's OS user reaches nobody else; the setting that names it,
//! `idgen.base62_key_file`, holds only a path.
//!
//! The file holds the passphrase itself, so the same passphrase gives the same codes as before:
//! its bytes, less one line ending at the end (`echo 'secret' > file` writes one), so a file
//! written by any editor or by `psql -Atc 'SHOW ...' >file` holds exactly the old setting's value.
//!
//! Pure Rust: the Postgres layer (`settings.rs`) reads it at start-up and at every reload.

use std::fs::{self, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Longer passphrases add nothing to a SipHash key derivation; the bound keeps a wrong path (a
/// log file, a device) from being read whole into memory.
pub const MAX_LEN: usize = 4096;

#[derive(Debug)]
pub enum Error {
    Io(io::Error),
    /// What it is instead ("a FIFO", "a folder", ...).
    NotAFile(&'static str),
    /// Its mode gives the group or others some access (the mode bits are carried).
    Exposed(u32),
    /// Owned by another OS user than the server's (uid of the file, uid of the server).
    NotOwned {
        file: u32,
        server: u32,
    },
    Empty,
    TooLong,
    /// A NUL byte: the old setting could not hold one, so no old key has one, and a binary file
    /// is far more likely a wrong path than a key.
    Nul,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::NotAFile(kind) => write!(f, "it is {kind}, not a regular file"),
            Self::Exposed(mode) => {
                write!(
                    f,
                    "it is readable or writable by other OS users (mode {:04o})",
                    mode & 0o7777
                )
            }
            Self::NotOwned { file, server } => {
                write!(
                    f,
                    "it is owned by OS user id {file}, not by the server's ({server})"
                )
            }
            Self::Empty => write!(f, "it is empty"),
            Self::TooLong => write!(f, "it is longer than {MAX_LEN} bytes"),
            Self::Nul => write!(f, "it contains a NUL byte"),
        }
    }
}

/// What a file type is, in the words of an error.
fn kind(t: FileType) -> &'static str {
    if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// Reads the passphrase from `path`, refusing a file that any other OS user than `server_uid`
/// could read or change. Nothing of the contents ever goes into an error.
///
/// Never blocks: the type is checked from the path (through a link) before anything is opened,
/// since opening a FIFO waits for a writer (a backend, or the postmaster at a reload, would sit
/// in open() deaf to cancels) and opening a device can do anything; the file is then opened
/// without blocking, in case it was swapped meanwhile, and what was opened is checked again.
pub fn read(path: &Path, server_uid: u32) -> Result<Vec<u8>, Error> {
    let named = fs::metadata(path).map_err(Error::Io)?.file_type();
    if !named.is_file() {
        return Err(Error::NotAFile(kind(named)));
    }
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(Error::Io)?;
    let meta = file.metadata().map_err(Error::Io)?;
    if !meta.is_file() {
        return Err(Error::NotAFile(kind(meta.file_type())));
    }
    if meta.uid() != server_uid {
        return Err(Error::NotOwned {
            file: meta.uid(),
            server: server_uid,
        });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(Error::Exposed(meta.mode()));
    }
    let mut bytes = Vec::new();
    file.by_ref()
        .take(MAX_LEN as u64 + 3) // room for a line ending after a passphrase of MAX_LEN
        .read_to_end(&mut bytes)
        .map_err(Error::Io)?;
    let len = passphrase(&bytes)?.len();
    bytes.truncate(len);
    Ok(bytes)
}

/// The passphrase in a file's contents: all of it less one final "\n" or "\r\n".
pub fn passphrase(contents: &[u8]) -> Result<&[u8], Error> {
    let key = contents
        .strip_suffix(b"\r\n")
        .or_else(|| contents.strip_suffix(b"\n"))
        .unwrap_or(contents);
    if key.is_empty() {
        Err(Error::Empty)
    } else if key.len() > MAX_LEN {
        Err(Error::TooLong)
    } else if key.contains(&0) {
        Err(Error::Nul)
    } else {
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, Permissions};
    use std::os::unix::fs::PermissionsExt;

    fn key_file(contents: &[u8], mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let path = dir.path().join("base62.key");
        fs::write(&path, contents).expect("written");
        fs::set_permissions(&path, Permissions::from_mode(mode)).expect("chmod");
        (dir, path)
    }

    fn me() -> u32 {
        unsafe { libc::geteuid() }
    }

    #[test]
    fn one_line_ending_is_not_part_of_the_key() {
        assert_eq!(passphrase(b"correct horse\n").unwrap(), b"correct horse");
        assert_eq!(passphrase(b"correct horse\r\n").unwrap(), b"correct horse");
        assert_eq!(passphrase(b"correct horse").unwrap(), b"correct horse");
        // only one: a passphrase may end in a blank line on purpose
        assert_eq!(
            passphrase(b"correct horse\n\n").unwrap(),
            b"correct horse\n"
        );
        assert_eq!(passphrase(b" spaces stay ").unwrap(), b" spaces stay ");
    }

    #[test]
    fn empty_long_and_binary_contents_are_refused() {
        assert!(matches!(passphrase(b""), Err(Error::Empty)));
        assert!(matches!(passphrase(b"\n"), Err(Error::Empty)));
        assert!(matches!(
            passphrase(&[b'k'; MAX_LEN + 1]),
            Err(Error::TooLong)
        ));
        assert_eq!(passphrase(&[b'k'; MAX_LEN]).unwrap().len(), MAX_LEN);
        assert!(matches!(passphrase(b"a\0b"), Err(Error::Nul)));
    }

    #[test]
    fn a_private_file_is_read() {
        let (_dir, path) = key_file(b"correct horse battery staple\n", 0o600);
        assert_eq!(read(&path, me()).unwrap(), b"correct horse battery staple");
        let (_dir, path) = key_file(b"read only\n", 0o400);
        assert_eq!(read(&path, me()).unwrap(), b"read only");
    }

    #[test]
    fn a_file_other_users_can_reach_is_refused_and_its_contents_never_shown() {
        for mode in [0o640, 0o604, 0o620, 0o644, 0o666, 0o610] {
            let (_dir, path) = key_file(b"secret passphrase\n", mode);
            let e = read(&path, me()).unwrap_err();
            assert!(
                matches!(e, Error::Exposed(m) if m & 0o777 == mode),
                "{mode:o}: {e:?}"
            );
            assert!(!e.to_string().contains("secret"), "{e}");
        }
    }

    #[test]
    fn a_file_of_another_user_a_folder_and_a_missing_file_are_refused() {
        let (_dir, path) = key_file(b"secret\n", 0o600);
        let e = read(&path, me() + 1).unwrap_err();
        assert!(matches!(e, Error::NotOwned { .. }), "{e:?}");
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(
            read(dir.path(), me()),
            Err(Error::NotAFile("a folder"))
        ));
        assert!(matches!(
            read(&dir.path().join("none"), me()),
            Err(Error::Io(_))
        ));
    }

    /// read() on another thread, failing the test if it has not returned within 5 s.
    fn read_within_5_s(path: &std::path::Path) -> Result<Vec<u8>, Error> {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || tx.send(read(&path, me())).unwrap());
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("read() blocked on the path for 5 s")
    }

    #[test]
    fn a_fifo_a_device_a_folder_and_links_to_them_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
        let folder = dir.path().join("folder");
        fs::create_dir(&folder).unwrap();
        let device = std::path::PathBuf::from("/dev/null");
        for (target, what) in [
            (&fifo, "a FIFO"),
            (&device, "a character device"),
            (&folder, "a folder"),
        ] {
            let link = dir
                .path()
                .join(format!("link-to-{}", what.replace(' ', "-")));
            std::os::unix::fs::symlink(target, &link).unwrap();
            for path in [target, &link] {
                let e = read_within_5_s(path).unwrap_err();
                assert!(
                    matches!(e, Error::NotAFile(k) if k == what),
                    "{path:?}: {e:?}"
                );
                assert_eq!(e.to_string(), format!("it is {what}, not a regular file"));
            }
        }
    }

    #[test]
    fn a_huge_file_is_not_read_whole() {
        let (_dir, path) = key_file(&vec![b'k'; 10 * MAX_LEN], 0o600);
        assert!(matches!(read(&path, me()), Err(Error::TooLong)));
    }
}
