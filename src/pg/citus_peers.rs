//! Inside Citus with no registry: before this server's first id, its worker id and id space are
//! checked against every other node's (the primaries in Citus's `pg_dist_node`), over libpq, and
//! a clash is refused before anything is issued. The rule and why it holds are the core's
//! (`idgen_core::peers`); this is where the state lives (one word in shared memory, read per id,
//! and what was found, under a lock) and how the other nodes are reached.
//!
//! The check runs in the backend whose snowflake_next() finds it not yet done, in a database
//! with Citus: it reads the nodes through SPI and asks each, as the session's user, for
//! `idgen_identity()`, with Citus's `citus.node_conninfo` and 2 s deadlines to connect and to
//! answer. Other backends wait for it (a minute at most). A node it cannot reach is not checked,
//! and a WARNING names it; that node checks this one in its turn. A server that found a clash
//! looks again at most every `RECHECK_MS`, so that giving the other node its own id clears it.

use crate::pg::clock;
use crate::pg::libpq::{self, Conn, Rows};
use crate::pg::settings;
use idgen_core::layout::Layout;
use idgen_core::peers::{self, Check, Clash, Identity, Peer, Seen, Verdict};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic, PgLwLock};
use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

const UNCHECKED: u32 = 0;
const CHECKING: u32 = 1;
const CLEAR: u32 = 2;
const CLASH: u32 = 3;

/// How long a connection to another node, and then its answer, may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(2);
const ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// How long a backend waits for another's check before it gives up (and its statement fails).
const WAIT_AT_MOST: Duration = Duration::from_secs(60);
/// A server that found a clash looks again no sooner than this after its last look.
pub const RECHECK_MS: u64 = 10_000;

static STATE: PgAtomic<AtomicU32> = unsafe { PgAtomic::new(c"idgen_citus_check") };
static FOUND: PgLwLock<Found> = unsafe { PgLwLock::new(c"idgen_citus_found") };

/// Set in the postmaster while preloading when Citus is preloaded too; inherited across fork.
static CITUS: AtomicBool = AtomicBool::new(false);

const NAME: usize = 256;

/// The clash found at the last look (written under the lock by the backend that looked).
#[derive(Clone, Copy)]
struct Found {
    looked_at_ms: u64,
    other_id_space: bool,
    worker_id: u16,
    epoch_ms: u64,
    layout: Layout,
    other_len: usize,
    other: [u8; NAME],
}

impl Default for Found {
    fn default() -> Self {
        Found {
            looked_at_ms: 0,
            other_id_space: false,
            worker_id: 0,
            epoch_ms: 0,
            layout: Layout::TWITTER,
            other_len: 0,
            other: [0; NAME],
        }
    }
}

// SAFETY: plain data, no pointers.
unsafe impl PGRXSharedMemory for Found {}

/// From `_PG_init` while preloading.
pub fn init() {
    pg_shmem_init!(STATE = AtomicU32::new(UNCHECKED));
    pg_shmem_init!(FOUND);
    CITUS.store(citus_preloaded(), Ordering::Relaxed);
}

fn citus_preloaded() -> bool {
    let list = unsafe { pg_sys::shared_preload_libraries_string };
    if list.is_null() {
        return false;
    }
    unsafe { CStr::from_ptr(list) }
        .to_string_lossy()
        .split(',')
        .any(|name| name.trim().trim_matches('"') == "citus")
}

/// Where this server's check stands, as `idgen_identity()` answers another node; `Off` where
/// it makes none (Citus not preloaded, or a registry decides the worker id).
pub fn standing(registry_configured: bool) -> Check {
    if !CITUS.load(Ordering::Relaxed) || registry_configured {
        return Check::Off;
    }
    match STATE.get().load(Ordering::Acquire) {
        CHECKING => Check::Checking,
        CLEAR => Check::Clear,
        CLASH => Check::Clash,
        _ => Check::Unchecked,
    }
}

/// Why this server issues nothing: the clash its last look found.
pub struct Refused {
    pub clash: Clash,
    /// When that look was (Unix ms), and when the next may be.
    pub looked_at_ms: u64,
}

/// Whether a server with the fixed worker id `worker_id` and no registry may issue: at once
/// where it makes no check or its check is clear (one load of one word); else after its check,
/// which this backend makes or waits for. `Err(None)`: another backend's check took longer
/// than `WAIT_AT_MOST`.
pub fn clear(worker_id: u16) -> Result<(), Option<Refused>> {
    if !CITUS.load(Ordering::Relaxed) || STATE.get().load(Ordering::Acquire) == CLEAR {
        return Ok(());
    }
    check_or_wait(worker_id)
}

#[cold]
fn check_or_wait(worker_id: u16) -> Result<(), Option<Refused>> {
    if !citus_in_this_database() {
        // This database holds no Citus table for its ids to meet another node's in.
        return Ok(());
    }
    let began = Instant::now();
    loop {
        match STATE.get().load(Ordering::Acquire) {
            CLEAR => return Ok(()),
            CLASH => {
                let found = *FOUND.share();
                if clock::now_unix_ms() < found.looked_at_ms.saturating_add(RECHECK_MS)
                    || !claim(CLASH)
                {
                    return Err(Some(refused_of(&found)));
                }
                look(worker_id, CLASH);
            }
            CHECKING => {
                if began.elapsed() > WAIT_AT_MOST {
                    return Err(None);
                }
                std::thread::sleep(Duration::from_millis(10));
                pgrx::check_for_interrupts!();
            }
            _ => {
                if claim(UNCHECKED) {
                    look(worker_id, UNCHECKED);
                }
            }
        }
    }
}

/// Takes the check on, from state `from`; false where another backend took it first.
fn claim(from: u32) -> bool {
    STATE
        .get()
        .compare_exchange(from, CHECKING, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Puts the state back to where it was should the look end in an error (a cancel, an SPI
/// error): the next caller looks again.
struct Undo(u32);

impl Drop for Undo {
    fn drop(&mut self) {
        if self.0 != CHECKING {
            STATE.get().store(self.0, Ordering::Release);
        }
    }
}

/// This backend's look at every other node, and its outcome published.
fn look(worker_id: u16, from: u32) {
    let mut undo = Undo(from);
    let own = Identity {
        worker_id: Some(worker_id),
        epoch_ms: settings::epoch_ms(),
        layout: settings::layout(),
    };
    let peers = ask_every_other_node();
    let verdict = peers::verdict(&own, &peers);
    let now = clock::now_unix_ms();
    match verdict {
        Verdict::Clear { unchecked } => {
            FOUND.exclusive().looked_at_ms = now;
            STATE.get().store(CLEAR, Ordering::Release);
            for (node, why) in unchecked {
                warning!(
                    "idgen: worker id {worker_id} was not checked against node {node}: {why}; that node checks this one when it next starts or looks again"
                );
            }
        }
        Verdict::Refuse(clash) => {
            let mut found = FOUND.exclusive();
            *found = Found {
                looked_at_ms: now,
                ..Found::default()
            };
            let other = match &clash {
                Clash::SameWorkerId { worker_id, other } => {
                    found.worker_id = *worker_id;
                    other
                }
                Clash::OtherIdSpace {
                    other,
                    epoch_ms,
                    layout,
                } => {
                    found.other_id_space = true;
                    found.epoch_ms = *epoch_ms;
                    found.layout = *layout;
                    other
                }
            };
            let bytes = other.as_bytes();
            let n = bytes.len().min(NAME);
            found.other[..n].copy_from_slice(&bytes[..n]);
            found.other_len = n;
            drop(found);
            STATE.get().store(CLASH, Ordering::Release);
        }
    }
    undo.0 = CHECKING;
}

fn refused_of(found: &Found) -> Refused {
    let other = String::from_utf8_lossy(&found.other[..found.other_len.min(NAME)]).into_owned();
    let clash = if found.other_id_space {
        Clash::OtherIdSpace {
            other,
            epoch_ms: found.epoch_ms,
            layout: found.layout,
        }
    } else {
        Clash::SameWorkerId {
            worker_id: found.worker_id,
            other,
        }
    };
    Refused {
        clash,
        looked_at_ms: found.looked_at_ms,
    }
}

thread_local! {
    /// When this backend last found its database without Citus (a backend stays in one
    /// database; Citus may be created in it later, so it is asked again after a second).
    static NO_CITUS_SEEN: Cell<Option<Instant>> = const { Cell::new(None) };
}

fn citus_in_this_database() -> bool {
    if NO_CITUS_SEEN
        .get()
        .is_some_and(|at| at.elapsed() < Duration::from_secs(1))
    {
        return false;
    }
    let oid = unsafe { pg_sys::get_extension_oid(c"citus".as_ptr(), true) };
    let found = oid != pg_sys::InvalidOid;
    NO_CITUS_SEEN.set((!found).then(Instant::now));
    found
}

/// The other primaries of this Citus cluster, as this node's metadata has them, and how to
/// reach each as this session's user.
struct Nodes {
    database: String,
    user: String,
    node_conninfo: String,
    /// idgen's schema here, quoted: Citus creates the extension in the same schema everywhere.
    schema: String,
    nodes: Vec<(String, i32, i32)>,
}

fn other_nodes() -> Nodes {
    Spi::connect(|client| {
        let about = client
            .select(
                "SELECT pg_catalog.current_database()::text AS database, current_user::text AS usr, \
                 COALESCE(pg_catalog.current_setting('citus.node_conninfo', true), '') AS node_conninfo, \
                 (SELECT pg_catalog.quote_ident(n.nspname::text) FROM pg_catalog.pg_extension e \
                  JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'idgen') AS schema",
                None,
                &[],
            )
            .expect("the session's database and user")
            .first();
        let text = |name: &str| -> String {
            about
                .get_by_name::<String, _>(name)
                .ok()
                .flatten()
                .unwrap_or_default()
        };
        let (database, user, node_conninfo, schema) = (
            text("database"),
            text("usr"),
            text("node_conninfo"),
            text("schema"),
        );
        let nodes = client
            .select(
                "SELECT n.nodename::text AS nodename, n.nodeport, n.groupid \
                 FROM pg_catalog.pg_dist_node n \
                 WHERE n.noderole = 'primary' AND n.isactive \
                 AND n.groupid <> (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l) \
                 ORDER BY n.groupid, n.nodeid",
                None,
                &[],
            )
            .expect("Citus's pg_dist_node")
            .map(|row| {
                (
                    row.get_by_name::<String, _>("nodename")
                        .ok()
                        .flatten()
                        .unwrap_or_default(),
                    row.get_by_name::<i32, _>("nodeport")
                        .ok()
                        .flatten()
                        .unwrap_or_default(),
                    row.get_by_name::<i32, _>("groupid")
                        .ok()
                        .flatten()
                        .unwrap_or_default(),
                )
            })
            .collect();
        Nodes {
            database,
            user,
            node_conninfo,
            schema,
            nodes,
        }
    })
}

fn ask_every_other_node() -> Vec<Peer> {
    let nodes = other_nodes();
    let extra = libpq::parse_conninfo(&nodes.node_conninfo).unwrap_or_default();
    let sql = CString::new(format!(
        "SELECT worker_id, epoch_ms, layout, peer_check FROM {}.idgen_identity()",
        nodes.schema
    ))
    .unwrap_or_default();
    nodes
        .nodes
        .iter()
        .map(|(host, port, group)| {
            let name = format!("{host}:{port} (Citus group {group})");
            let seen = ask(&nodes, &extra, host, *port, &name, &sql);
            Peer { name, seen }
        })
        .collect()
}

fn ask(
    nodes: &Nodes,
    extra: &[(String, String)],
    host: &str,
    port: i32,
    name: &str,
    sql: &CStr,
) -> Seen {
    let c = |s: &str| CString::new(s).unwrap_or_default();
    let mut owned: Vec<(CString, CString)> = extra.iter().map(|(k, v)| (c(k), c(v))).collect();
    owned.extend([
        (c("host"), c(host)),
        (c("port"), c(&port.to_string())),
        (c("dbname"), c(&nodes.database)),
        (c("user"), c(&nodes.user)),
        (
            c("connect_timeout"),
            c(&CONNECT_WITHIN.as_secs().to_string()),
        ),
        (c("application_name"), c("idgen peer check")),
        (c("options"), c("-c statement_timeout=2s")),
    ]);
    let pairs: Vec<(&CStr, &CStr)> = owned
        .iter()
        .map(|(k, v)| (k.as_c_str(), v.as_c_str()))
        .collect();
    // A cancel of this backend's statement ends the look (the connection closes as it unwinds).
    let stop = || {
        pgrx::check_for_interrupts!();
        false
    };
    let mut conn = Conn::new(format!("node {name}"));
    if let Err(f) = conn.open(&pairs, false, CONNECT_WITHIN, &stop) {
        return Seen::Unreachable(f.text());
    }
    match conn.call(sql, &[], ANSWER_WITHIN, &stop, read_identity) {
        Ok(Ok(seen)) => seen,
        Ok(Err(why)) => Seen::Unreachable(why),
        Err(f) => Seen::Unreachable(f.text()),
    }
}

/// The other node's answer, each column by its name.
fn read_identity(rows: &Rows) -> Result<Result<Seen, String>, libpq::Failure> {
    Ok((|| {
        if rows.count() != 1 {
            return Err("its idgen_identity() returned no row".to_string());
        }
        let column = |name: &CStr| {
            rows.column(name).ok_or_else(|| {
                format!(
                    "its idgen_identity() answers no column {}",
                    name.to_string_lossy()
                )
            })
        };
        let worker = rows.text(0, column(c"worker_id")?);
        let epoch = rows.text(0, column(c"epoch_ms")?);
        let layout = rows.text(0, column(c"layout")?);
        let check = rows.text(0, column(c"peer_check")?);
        let unreadable = |what: &str, value: &Option<String>| {
            format!("its idgen_identity() answered a {what} this idgen does not read: {value:?}")
        };
        let worker_id = match &worker {
            None => None,
            Some(w) => Some(
                w.parse::<u16>()
                    .map_err(|_| unreadable("worker id", &worker))?,
            ),
        };
        let epoch_ms = epoch
            .as_deref()
            .and_then(|e| e.parse::<u64>().ok())
            .ok_or_else(|| unreadable("epoch", &epoch))?;
        let layout_parsed = layout
            .as_deref()
            .and_then(|l| Layout::parse(l).ok())
            .ok_or_else(|| unreadable("layout", &layout))?;
        let check_parsed = check
            .as_deref()
            .and_then(Check::parse)
            .ok_or_else(|| unreadable("check", &check))?;
        Ok(Seen::Answered {
            identity: Identity {
                worker_id,
                epoch_ms,
                layout: layout_parsed,
            },
            check: check_parsed,
        })
    })())
}
