//! The registry's client side: its calls, `idgen_registry.claim()`, `release()` and `take_block()`, over
//! `libpq` (asynchronous, so that a registry that stops answering costs the lease worker a
//! deadline, never a hang), and nothing of shared memory.

use crate::pg::libpq::{self, Conn, Rows};
use idgen_core::lease::{self, Answer, Grant, Granted, How, Reply, TermCause};
use std::ffi::{c_int, CStr, CString};
use std::time::Duration;

/// How long a connection attempt, and then one claim, may take.
const CONNECT_DEADLINE: Duration = Duration::from_secs(5);
const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// Why a claim got no answer.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    /// A problem an operator must fix (no schema, no rights): said as such in the log.
    pub misconfigured: bool,
}

impl Failure {
    fn plain(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            misconfigured: false,
        }
    }
}

/// Parses a connection string as libpq does and checks it (no password in it). The error is
/// libpq's or ours, for the setting's check hook.
pub fn check_conninfo(conninfo: &str) -> Result<(), String> {
    let pairs = libpq::parse_conninfo(conninfo)?;
    lease::check_conninfo(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// One connection to the registry, kept between renewals and opened again when it breaks.
pub struct Registry {
    conninfo: CString,
    application_name: CString,
    conn: Conn,
}

/// What the lease worker sends with each claim.
pub struct Claim<'a> {
    pub holder: &'a str,
    /// This run of the server (`registry::run()`): a lease is one run's.
    pub run: &'a str,
    pub holder_name: &'a str,
    pub worker_id: Option<u16>,
    pub lease_ms: u64,
    pub horizon_ms: u64,
    /// The claimant's fence if the claim succeeds (its clock); None: not fenced (a fixed id).
    pub fence_ms: Option<u64>,
    /// The id space: idgen.layout as idgen writes it, and idgen.epoch (Unix ms). A registry
    /// serves one.
    pub layout: &'a str,
    pub epoch_ms: u64,
    /// The layout's largest worker id: an answer naming a larger one is not believed.
    pub max_worker: u64,
    /// How long past its lease the server issues while it cannot reach the registry.
    pub grace_ms: u64,
    /// The registry's term the lease is held under, to re-assert it should the registry have
    /// begun another (`lease::reassert_term`); None: a new claim.
    pub term: Option<u64>,
}

/// The columns of `idgen_registry.claim()`'s row that this idgen reads, each found by its name
/// in the answer (a registry of another schema version is said so, not misread).
const CLAIM_COLUMNS: [&CStr; 19] = [
    c"outcome",
    c"worker_id",
    c"lease_ends_ms",
    c"last_horizon_ms",
    c"predecessor_ends_ms",
    c"predecessor_fence_ms",
    c"other_holder_name",
    c"other_lease_ends_ms",
    c"registry_now_ms",
    c"role_leases",
    c"role_quota",
    c"registry_epoch_ms",
    c"registry_term",
    c"hold_off_until_ms",
    c"granted_lease_ms",
    c"granted_grace_ms",
    c"term_cause",
    c"clock_ahead_ms",
    c"allowed_skew_ms",
];

impl Registry {
    pub fn new(conninfo: &str, application_name: &str) -> Self {
        Registry {
            conninfo: CString::new(conninfo).unwrap_or_default(),
            application_name: CString::new(application_name).unwrap_or_default(),
            conn: Conn::new("the registry"),
        }
    }

    /// Sends one claim and reads its answer; `stop()` is polled while waiting (SIGTERM).
    pub fn claim(&mut self, claim: &Claim, stop: &dyn Fn() -> bool) -> Result<Reply, Failure> {
        self.connect(stop)?;
        let params = [
            Some(claim.holder.to_string()),
            Some(claim.run.to_string()),
            Some(claim.holder_name.to_string()),
            claim.worker_id.map(|w| w.to_string()), // NULL: any free id
            Some(claim.lease_ms.to_string()),
            Some(claim.horizon_ms.to_string()),
            claim.fence_ms.map(|f| f.to_string()), // NULL: not fenced
            Some(claim.layout.to_string()),
            Some(claim.epoch_ms.to_string()),
            Some(claim.grace_ms.to_string()),
            claim.term.map(|t| t.to_string()), // NULL: a new claim
        ];
        // Named on both sides: the arguments by their names, the row by its columns' names.
        let result = self.conn.call(
            c"SELECT * FROM idgen_registry.claim(p_holder => $1, p_run => $2, p_holder_name => $3, p_worker_id => $4::integer, p_lease_ms => $5::integer, p_horizon_ms => $6::bigint, p_fence_ms => $7::bigint, p_layout => $8, p_epoch_ms => $9::bigint, p_grace_ms => $10::integer, p_term => $11::bigint)",
            &params,
            CALL_DEADLINE,
            stop,
            |rows| Ok(read_reply(rows, claim.max_worker)),
        );
        let result = result.map_err(|f| failure_of(f, "claim")).and_then(|r| r);
        if result.as_ref().is_err_and(|f| !f.misconfigured) {
            // The connection may be half-dead: start afresh next time.
            self.conn.close();
        }
        result
    }

    /// Releases run `run`'s lease at a clean shutdown, after which the server issues nothing:
    /// the worker id released, or None where the registry had no lease of this run.
    pub fn release(
        &mut self,
        holder: &str,
        run: &str,
        last_ms: u64,
    ) -> Result<Option<u16>, Failure> {
        let never = || false;
        self.connect(&never)?;
        let params = [
            Some(holder.to_string()),
            Some(run.to_string()),
            Some(last_ms.to_string()),
        ];
        self.conn
            .call(
                c"SELECT idgen_registry.release($1, $2, $3::bigint)",
                &params,
                CALL_DEADLINE,
                &never,
                |rows| {
                    let released = (rows.count() == 1)
                        .then(|| rows.text(0, 0))
                        .flatten()
                        .and_then(|t| t.parse::<u16>().ok());
                    Ok(released)
                },
            )
            .map_err(|f| failure_of(f, "release"))
    }

    /// Asks for `blocks` consecutive blocks of counter `counter` at once
    /// (`idgen_registry.take_block()`; it may grant fewer).
    pub fn take_block(
        &mut self,
        counter: &str,
        blocks: u32,
        stop: &dyn Fn() -> bool,
    ) -> Result<BlockReply, Failure> {
        self.connect(stop)?;
        let params = [Some(counter.to_string()), Some(blocks.to_string())];
        let result = self
            .conn
            .call(
                c"SELECT * FROM idgen_registry.take_block(p_counter => $1, p_blocks => $2::integer)",
                &params,
                CALL_DEADLINE,
                stop,
                |rows| Ok(read_block(rows)),
            )
            .map_err(|f| failure_of(f, "block"))
            .and_then(|r| r);
        if result.as_ref().is_err_and(|f| !f.misconfigured) {
            self.conn.close();
        }
        result
    }

    /// Opens the connection unless it is open (each claim and release does so first).
    pub fn connect(&mut self, stop: &dyn Fn() -> bool) -> Result<(), Failure> {
        // Defaults first, so that the connection string (expanded from dbname) can override
        // them; the timeouts bound what the registry side spends on one claim.
        let pairs = [
            (c"connect_timeout", c"5"),
            (c"application_name", self.application_name.as_c_str()),
            // A lease must survive the registry's crash: its commit is flushed whatever the
            // registry's default.
            // READ COMMITTED whatever the registry's default: take_block() re-reads what others
            // committed after its draws, and runs at no other level.
            (c"options", c"-c statement_timeout=5s -c lock_timeout=3s -c idle_in_transaction_session_timeout=10s -c synchronous_commit=on -c default_transaction_isolation=read\\ committed"),
            (c"dbname", self.conninfo.as_c_str()),
        ];
        self.conn
            .open(&pairs, true, CONNECT_DEADLINE, stop)
            .map_err(|f| Failure::plain(f.text()))
    }
}

/// What a failed call says, in words for the log: `what` is the call.
fn failure_of(failure: libpq::Failure, what: &str) -> Failure {
    let (sqlstate, message) = match failure {
        libpq::Failure::Broken(why) => return Failure::plain(why),
        libpq::Failure::Refused { sqlstate, message } => (sqlstate, message),
    };
    match sqlstate.as_str() {
        // invalid_schema_name, undefined_function, undefined_table
        "3F000" | "42883" | "42P01" => Failure {
            message: format!("the registry database has no idgen_registry schema of this idgen version ({message}): install sql/registry/idgen_registry.sql there"),
            misconfigured: true,
        },
        "42501" => Failure {
            message: format!("the registry refused the {what} ({message}): the role idgen.registry connects as must be a member of idgen_fleet"),
            misconfigured: true,
        },
        _ => Failure {
            message: format!("the registry refused the {what}: {message} (SQLSTATE {sqlstate})"),
            misconfigured: sqlstate.starts_with("42") || sqlstate.starts_with("22"),
        },
    }
}

fn read_reply(rows: &Rows, max_worker: u64) -> Result<Reply, Failure> {
    if rows.count() != 1 {
        return Err(Failure::plain("the registry's claim() returned no row"));
    }
    // Each column by its name; one missing means a registry schema this idgen does not speak.
    let mut at = [0 as c_int; CLAIM_COLUMNS.len()];
    for (i, name) in CLAIM_COLUMNS.iter().enumerate() {
        let Some(col) = rows.column(name) else {
            return Err(Failure {
                message: format!(
                    "the registry's idgen_registry.claim() answers no column {}: install the sql/registry/idgen_registry.sql of this idgen version there",
                    name.to_string_lossy()
                ),
                misconfigured: true,
            });
        };
        at[i] = col;
    }
    let column = |name: &CStr| -> c_int {
        let i = CLAIM_COLUMNS
            .iter()
            .position(|c| *c == name)
            .expect("a column of CLAIM_COLUMNS");
        at[i]
    };
    let text = |name: &CStr| rows.text(0, column(name));
    let number = |name: &CStr| -> u64 {
        text(name)
            .and_then(|t| t.parse::<i64>().ok())
            .map_or(0, |n| n.max(0) as u64)
    };
    let worker = || -> Result<u16, Failure> {
        text(c"worker_id")
            .and_then(|t| t.parse::<u16>().ok())
            .filter(|w| u64::from(*w) <= max_worker)
            .ok_or_else(|| Failure::plain("the registry's claim() returned no valid worker id"))
    };
    // Another member's words: no control character of theirs reaches this server's log or errors.
    let other = || text(c"other_holder_name").map(|t| lease::printable(&t));
    let grant = |how| -> Result<Answer, Failure> {
        Ok(Answer::Granted {
            how,
            previous: other(),
            grant: Grant {
                worker_id: worker()?,
                lease_ends_ms: number(c"lease_ends_ms"),
                last_horizon_ms: number(c"last_horizon_ms"),
                predecessor_ends_ms: number(c"predecessor_ends_ms"),
                predecessor_fence_ms: number(c"predecessor_fence_ms"),
            },
        })
    };
    let answer = match text(c"outcome").as_deref() {
        Some("held") => grant(How::Held),
        Some("claimed") => grant(How::Claimed),
        Some("taken_over") => grant(How::TakenOver),
        Some("resumed") => grant(How::Resumed),
        Some("reasserted") => grant(How::Reasserted),
        Some(over @ ("over_quota" | "earlier_run")) => Ok(Answer::OverQuota {
            held: number(c"role_leases") as u32,
            quota: number(c"role_quota") as u32,
            holding: other().unwrap_or_default(),
            first_ends_ms: number(c"other_lease_ends_ms"),
            own_earlier_run: over == "earlier_run",
        }),
        Some("clock_ahead") => Ok(Answer::ClockAhead {
            ahead_ms: number(c"clock_ahead_ms"),
            allowed_ms: number(c"allowed_skew_ms"),
        }),
        Some("conflict") => Ok(Answer::Conflict {
            worker_id: worker()?,
            other: other().unwrap_or_else(|| "another server".into()),
            other_lease_ends_ms: number(c"other_lease_ends_ms"),
        }),
        Some("exhausted") => Ok(Answer::Exhausted),
        Some("wrong_id_space") => Ok(Answer::WrongIdSpace {
            registry_layout: other().unwrap_or_default(),
            registry_epoch_ms: number(c"registry_epoch_ms"),
        }),
        Some("holding_off") => Ok(Answer::HoldingOff {
            until_ms: number(c"hold_off_until_ms"),
            cause: TermCause::parse(&text(c"term_cause").unwrap_or_default()),
        }),
        other => Err(Failure::plain(format!(
            "the registry's claim() answered {other:?}, which this idgen does not know"
        ))),
    }?;
    // What the registry granted, where it says (not with an answer that grants nothing).
    let granted = match (text(c"granted_lease_ms"), text(c"granted_grace_ms")) {
        (Some(_), Some(_)) => Some(Granted {
            lease_ms: number(c"granted_lease_ms"),
            grace_ms: number(c"granted_grace_ms"),
        }),
        _ => None,
    };
    Ok(Reply {
        answer,
        term: number(c"registry_term"),
        granted,
    })
}

/// What `idgen_registry.take_block()` answered.
#[derive(Debug)]
pub struct BlockReply {
    pub outcome: String,
    pub first: u64,
    pub end: u64,
    pub width: u32,
    pub block_size: u64,
    /// When the counter's pace allows the next block, and the registry's clock as it answered
    /// (Unix ms).
    pub retry_at_ms: u64,
    pub registry_now_ms: u64,
}

fn read_block(rows: &Rows) -> Result<BlockReply, Failure> {
    if rows.count() != 1 {
        return Err(Failure::plain(
            "the registry's take_block() returned no row",
        ));
    }
    let mut missing = None;
    let mut text = |name: &CStr| -> Option<String> {
        match rows.column(name) {
            Some(col) => rows.text(0, col),
            None => {
                missing = Some(name.to_string_lossy().into_owned());
                None
            }
        }
    };
    let outcome = text(c"outcome").unwrap_or_default();
    let mut number = |name: &CStr| -> u64 {
        text(name)
            .and_then(|t| t.parse::<i64>().ok())
            .map_or(0, |n| n.max(0) as u64)
    };
    let reply = BlockReply {
        first: number(c"first_number"),
        end: number(c"end_number"),
        width: number(c"width") as u32,
        block_size: number(c"block_size"),
        retry_at_ms: number(c"retry_at_ms"),
        registry_now_ms: number(c"registry_now_ms"),
        outcome: lease::printable(&outcome),
    };
    if let Some(name) = missing {
        return Err(Failure {
            message: format!("the registry's idgen_registry.take_block() answers no column {name}: install the sql/registry/idgen_registry.sql of this idgen version there"),
            misconfigured: true,
        });
    }
    Ok(reply)
}
