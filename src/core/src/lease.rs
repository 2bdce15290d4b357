//! A worker id's lease from the registry (`sql/registry/idgen_registry.sql`): what a claim's answer
//! means for a server, pure, over plain numbers. The Postgres side (`registry.rs`) asks the
//! registry and publishes what this module decides.
//!
//! The rules, for a holder whose clock is at most `skew` ms off the registry's:
//! - **Fencing** (automatic ids, and fixed ids unless `idgen.unverified_worker_id = issue`): a
//!   server issues no id from a millisecond at or after the time it *sent* its last successful
//!   claim plus the lease length, by its own clock. The registry ends the lease `lease` ms after
//!   it *received* that claim, by its clock; so the fence is at most `skew` past the registry's
//!   end, and a fenced lease nobody renews is free to reuse once it ends, whatever kind of id
//!   it was. An unfenced lease (a fixed id that issues without the registry) never is: its
//!   holder may still be issuing.
//! - **Reuse**: a server that takes an id over resumes strictly after the later of the highest
//!   horizon any holder of the id recorded and the old lease's end plus `skew`; every id the old
//!   holder issued is below both, or below its fence.
//! - **Grace** (`idgen.lease_grace`): a holder that cannot reach the registry issues on past its
//!   lease for its grace, so its fence is the send time plus the lease plus the grace, and the
//!   registry keeps the id from others as long (its lease's end includes the grace).
//! - **Terms**: a registry that was promoted (or restored) may have lost the last leases it
//!   granted. Its term (its timeline, and when it began) comes with every answer; after a new
//!   term it grants no new lease until every lease it may have lost has ended (the hold-off), and
//!   a holder whose lease is live by its clock re-asserts it meanwhile by sending the term it holds
//!   it under (`reassert_term`). A new term begins after anything that may have lost history: a new
//!   timeline, a restore, and every start of the registry (`TermCause`).
//! - **Granted bounds**: the registry grants at most the longest lease and grace it allows, and a
//!   server fences at what was granted (`Granted`), so that lowering the bounds stops no server
//!   and no server issues past what the registry keeps its id for.

use crate::layout::MAX_WORKER_BITS;

/// How `idgen.worker_id` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `idgen.worker_id = N`: the id is configuration; the registry checks that no other server
    /// holds it.
    Fixed(u16),
    /// `idgen.worker_id = auto`: the registry hands one out, and the lease is the right to issue.
    Auto,
}

/// A server's terms with the registry: `idgen.worker_id`, and whether a fixed id issues while
/// the registry does not confirm it (`idgen.unverified_worker_id = issue`; automatic ids never
/// do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub mode: Mode,
    pub issue_unconfirmed: bool,
    /// How long past its lease the server issues while it cannot reach the registry
    /// (`idgen.lease_grace`): part of its fence, and of the lease the registry records.
    pub grace_ms: u64,
}

impl Policy {
    /// Is the lease the right to issue, so that the server stops at its end unless renewed?
    /// Every lease is, but a fixed id's under `issue`: that server carries on without the
    /// registry, so its lease, once ended, says nothing about whether it still issues.
    pub fn fenced(&self) -> bool {
        match self.mode {
            Mode::Auto => true,
            Mode::Fixed(_) => !self.issue_unconfirmed,
        }
    }

    /// The fence a claim sent at `sent_ms` sets if it succeeds: no id from this millisecond
    /// (this server's clock) unless a renewal succeeds first. None: not fenced. `granted`: the
    /// lease and grace the registry granted, where it granted less than asked for.
    pub fn fence_ms(&self, sent_ms: u64, lease_ms: u64, granted: Option<Granted>) -> Option<u64> {
        let (lease_ms, grace_ms) = match granted {
            Some(g) => (lease_ms.min(g.lease_ms), self.grace_ms.min(g.grace_ms)),
            None => (lease_ms, self.grace_ms),
        };
        self.fenced()
            .then(|| sent_ms.saturating_add(lease_ms).saturating_add(grace_ms))
    }
}

/// The lease and grace a registry granted with an answer: those asked for, or less where they
/// exceed the bounds its owner set (`idgen_registry.clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub lease_ms: u64,
    pub grace_ms: u64,
}

/// Why the registry's term began: what may have lost the leases it granted before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermCause {
    /// The term it was installed in: it follows no other.
    Installed,
    /// A new timeline: a promotion, a point-in-time restore.
    NewTimeline,
    /// Its data is another's than at the last claim: a restore from a dump, a copy of another
    /// cluster.
    Restored,
    /// Its server started since the last claim: a restart, or a start from an older copy of its
    /// data directory, which cannot be told apart.
    Started,
    /// Its owner began one (`idgen_registry.hold_off()`).
    HoldOff,
}

impl TermCause {
    /// The registry's word for it (`claim()`'s `term_cause`); an unknown word counts as a start,
    /// whose hold-off is as long as any.
    pub fn parse(word: &str) -> Self {
        match word {
            "installed" => TermCause::Installed,
            "new timeline" => TermCause::NewTimeline,
            "restored" => TermCause::Restored,
            "hold_off" => TermCause::HoldOff,
            _ => TermCause::Started,
        }
    }

    /// What happened to the registry, for a message: "it was …".
    pub fn what(self) -> &'static str {
        match self {
            TermCause::Installed => "it was installed",
            TermCause::NewTimeline => "it was promoted, or restored onto a new timeline",
            TermCause::Restored => "it was restored from a dump or from a copy of another cluster",
            TermCause::Started => {
                "it was started (a restart cannot be told from a start from an older copy of its data directory)"
            }
            TermCause::HoldOff => "its owner began a new term (idgen_registry.hold_off())",
        }
    }

    /// A number for shared memory, and back.
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Self {
        [
            TermCause::Installed,
            TermCause::NewTimeline,
            TermCause::Restored,
            TermCause::Started,
            TermCause::HoldOff,
        ]
        .get(usize::from(code))
        .copied()
        .unwrap_or(TermCause::Started)
    }
}

/// A mode alone: with the default `idgen.unverified_worker_id` (refuse), every lease is fenced.
impl From<Mode> for Policy {
    fn from(mode: Mode) -> Self {
        Policy {
            mode,
            issue_unconfirmed: false,
            grace_ms: 0,
        }
    }
}

/// Parses `idgen.worker_id`: `auto`, or a whole number 0-65535 (the widest worker field a
/// layout has; the server checks it against its own layout's at start-up); empty or -1 means
/// unset.
pub fn parse_worker_id(text: &str) -> Result<Option<Mode>, String> {
    let text = text.trim();
    if text.is_empty() || text == "-1" {
        return Ok(None);
    }
    if text.eq_ignore_ascii_case("auto") {
        return Ok(Some(Mode::Auto));
    }
    const MAX: u32 = (1 << MAX_WORKER_BITS) - 1;
    match text.parse::<u32>() {
        Ok(id) if id <= MAX => Ok(Some(Mode::Fixed(id as u16))),
        _ => Err(format!(
            "{text:?} is neither a worker id (0-{MAX}) nor \"auto\""
        )),
    }
}

/// Refuses a registry connection string that carries a password: PostgreSQL shows the setting
/// to members of pg_read_all_settings (and so of pg_monitor). `options` are the connection
/// string's keywords and values as libpq parsed them.
pub fn check_conninfo<'a>(
    options: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), String> {
    for (key, value) in options {
        if (key == "password" || key == "sslpassword") && !value.is_empty() {
            return Err(format!("idgen.registry must not carry a {key}"));
        }
    }
    Ok(())
}

/// What the registry answered to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The lease is this holder's: `how` it came to be, the lease as it now stands, and the
    /// holder it was taken from (taken over or resumed; None: never leased, or freed by the
    /// registry's owner), as the registry names it.
    Granted {
        how: How,
        grant: Grant,
        previous: Option<String>,
    },
    /// Another holder has a live lease on the id asked for.
    Conflict {
        worker_id: u16,
        other: String,
        other_lease_ends_ms: u64,
    },
    /// Every one of the layout's worker ids is leased (automatic ids only).
    Exhausted,
    /// The registry serves another id space (its layout and epoch): its worker ids are not this
    /// server's.
    WrongIdSpace {
        registry_layout: String,
        registry_epoch_ms: u64,
    },
    /// The registry role this server connects as holds `held` leases (live, or unfenced and not
    /// freed), all its quota allows: `holding` names them, and the first fenced one ends at
    /// `first_ends_ms` (the registry's clock; 0: none is fenced). `own_earlier_run`: every one
    /// is this server's own (its system identifier): the run before a crash that could not
    /// release its lease, or a copy of this server running beside it.
    OverQuota {
        held: u32,
        quota: u32,
        holding: String,
        first_ends_ms: u64,
        own_earlier_run: bool,
    },
    /// The registry began a new term (`cause`) and grants no new lease until `until_ms` (its
    /// clock), while the holders it may have lost re-assert theirs.
    HoldingOff { until_ms: u64, cause: TermCause },
    /// What this server reported (its horizon, its fence) lies further ahead of the registry's
    /// clock than `allowed_ms` (the skew the registry allows) admits: its clock runs about
    /// `ahead_ms` ahead of the registry's. Nothing was granted.
    ClockAhead { ahead_ms: u64, allowed_ms: u64 },
}

/// An answer and the registry's term when it gave it (its timeline, and when that began), with
/// the lease and grace it granted (None: those asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub answer: Answer,
    pub term: u64,
    pub granted: Option<Granted>,
}

/// An answer of the registry's first term (tests, and callers that know no other).
impl From<Answer> for Reply {
    fn from(answer: Answer) -> Self {
        Reply {
            answer,
            term: 0,
            granted: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// This holder had it already: a renewal, a restart, or a promoted standby of the holder.
    Held,
    /// Never leased before.
    Claimed,
    /// Another holder's lease on it has ended.
    TakenOver,
    /// Another run of this same server (system identifier and registry role) held it, and
    /// that lease has ended or was released: a restart, after a crash or a clean shutdown.
    Resumed,
    /// This holder held it under an earlier term of the registry, which may have lost that
    /// lease in a failover, and has it again (as a renewal would have kept it).
    Reasserted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub worker_id: u16,
    /// When the registry ends the lease (its clock, Unix ms).
    pub lease_ends_ms: u64,
    /// The highest horizon any holder of this id recorded (Unix ms, 0: none).
    pub last_horizon_ms: u64,
    /// The latest end of an earlier holder's lease (the registry's clock, Unix ms; 0: none).
    pub predecessor_ends_ms: u64,
    /// The highest fence any earlier holder reported, not only the last one (each in its own
    /// clock, Unix ms; 0: none, or none was fenced): a holder whose clock ran ahead may have
    /// issued past every later holder's fence.
    pub predecessor_fence_ms: u64,
}

impl Grant {
    /// The millisecond after which this holder may resume (Unix ms): no earlier holder of the
    /// id issued an id after it. 0 when the id has no history. The old holder's own fence is
    /// in its clock, as its ids are, so it needs no allowance; the lease's end (the registry's
    /// clock) does, and covers a holder that could not report a fence.
    pub fn resume_after_ms(&self, skew_ms: u64) -> u64 {
        let predecessor = if self.predecessor_ends_ms == 0 {
            0
        } else {
            self.predecessor_ends_ms.saturating_add(skew_ms)
        };
        self.last_horizon_ms
            .max(predecessor)
            .max(self.predecessor_fence_ms)
    }
}

/// Where a run stands with the registry, as the lease worker keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// No claim has been answered yet.
    Pending,
    /// The registry granted the lease: ids may be issued (up to the fence, for automatic ids),
    /// under the registry's `term` of its last answer.
    Holding {
        worker_id: u16,
        fence_ms: u64,
        term: u64,
    },
    /// A fixed id that the registry could never confirm, issued anyway (`idgen.unverified_worker_id = issue`).
    Unverified,
    /// No id may be issued, for the reason given.
    Refused(Refusal),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Another holder's live lease has the id.
    Conflict {
        worker_id: u16,
        other: String,
        other_lease_ends_ms: u64,
    },
    /// No id is free.
    Exhausted,
    /// This server's registry role holds all the leases its quota allows (`own_earlier_run`:
    /// all of them this server's own, from an earlier run).
    OverQuota {
        held: u32,
        quota: u32,
        holding: String,
        first_ends_ms: u64,
        own_earlier_run: bool,
    },
    /// The lease of this run went to another holder (after it had ended): issuing on would
    /// repeat that holder's ids. Only a restart, which claims again, resumes. `forgotten`: the
    /// registry's term had changed since it granted the lease (a failover that lost it), rather
    /// than the lease ending unrenewed.
    Lost { worker_id: u16, forgotten: bool },
    /// A new term of the registry (`cause`): no new lease until `until_ms` (the registry's clock).
    HoldingOff { until_ms: u64, cause: TermCause },
    /// This server's clock runs about `ahead_ms` ahead of the registry's, more than the
    /// `allowed_ms` the registry allows: nothing is granted until the clocks agree.
    ClockAhead { ahead_ms: u64, allowed_ms: u64 },
    /// No claim of this run has succeeded, and policy is to wait for one (the message is the
    /// registry's or libpq's).
    NeverVerified,
    /// The registry serves another id space (its layout and epoch): nothing it leases is this
    /// server's.
    WrongIdSpace {
        registry_layout: String,
        registry_epoch_ms: u64,
    },
}

/// What the worker does with an answer to the claim it sent at `sent_ms` (its clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub standing: Standing,
    /// Resume strictly after this (Unix ms), 0: no floor: before ids open for the first time,
    /// or, for a run that was issuing and takes its own id back in a new term, before they open
    /// again (the worker waits for its clock to pass it).
    pub resume_after_ms: u64,
}

/// The lease protocol's state machine: `before` is the run's standing, `reply` the registry's
/// answer to a claim sent at `sent_ms` (by this server's clock) for `lease_ms`, with its term.
pub fn decide(
    policy: impl Into<Policy>,
    before: &Standing,
    reply: impl Into<Reply>,
    sent_ms: u64,
    lease_ms: u64,
    skew_ms: u64,
) -> Decision {
    let policy = policy.into();
    let Reply {
        answer,
        term,
        granted,
    } = reply.into();
    let mode = policy.mode;
    let fence_ms = policy
        .fence_ms(sent_ms, lease_ms, granted)
        .unwrap_or(u64::MAX);
    let refuse = |r| Decision {
        standing: Standing::Refused(r),
        resume_after_ms: 0,
    };
    let keep = || Decision {
        standing: before.clone(),
        resume_after_ms: 0,
    };
    // A registry of another id space: nothing it leases is this server's, whatever the run held.
    if let Answer::WrongIdSpace {
        registry_layout,
        registry_epoch_ms,
    } = answer
    {
        return refuse(Refusal::WrongIdSpace {
            registry_layout,
            registry_epoch_ms,
        });
    }
    // A fixed id issued on before the registry confirmed it: the first answer may find it
    // never leased, or this holder's own (this run's, or an earlier run's of this server), and
    // confirms it; another holder's means a clash. Over the role's quota, it stops issuing. A
    // registry holding off after a failover confirms nothing yet, and refutes nothing either.
    if let (Standing::Unverified, Mode::Fixed(id)) = (before, mode) {
        return match answer {
            Answer::Granted { how, grant, .. }
                if grant.worker_id == id
                    && matches!(how, How::Held | How::Claimed | How::Resumed) =>
            {
                Decision {
                    standing: Standing::Holding {
                        worker_id: id,
                        fence_ms,
                        term,
                    },
                    resume_after_ms: 0,
                }
            }
            Answer::HoldingOff { .. } => keep(),
            Answer::Conflict {
                worker_id,
                other,
                other_lease_ends_ms,
            } => refuse(Refusal::Conflict {
                worker_id,
                other,
                other_lease_ends_ms,
            }),
            Answer::OverQuota {
                held,
                quota,
                holding,
                first_ends_ms,
                own_earlier_run,
            } => refuse(Refusal::OverQuota {
                held,
                quota,
                holding,
                first_ends_ms,
                own_earlier_run,
            }),
            // Reported nothing the registry took: it neither confirms nor refutes the id.
            Answer::ClockAhead { .. } => keep(),
            _ => refuse(Refusal::Lost {
                worker_id: id,
                forgotten: false,
            }),
        };
    }
    // The id this run has issued under, if any, and the term it holds it under: a later answer
    // must be a renewal (or a re-assertion) of it.
    let (issued_under, held_term) = match before {
        Standing::Holding {
            worker_id, term, ..
        } => (Some(*worker_id), *term),
        Standing::Refused(Refusal::Lost { .. }) => return keep(),
        _ => (None, term),
    };
    // The id went elsewhere: because the registry's term changed since it was granted (a
    // failover that lost the lease), or because it ended unrenewed.
    let lost = |id| {
        refuse(Refusal::Lost {
            worker_id: id,
            forgotten: held_term != term,
        })
    };
    match answer {
        Answer::Granted { how, grant, .. } => {
            // This run's own id back as a new claim, its lease having ended before a new term of
            // the registry began (a restart of the registry while this server was stopped at its
            // fence): resumed above everything any holder may have issued under it since, in
            // the history the registry kept or in one it lost (the hold-off's end, in its floor).
            // The generator runs on, so the worker opens the permit only once this server's
            // clock has passed that floor (`Decision::resume_after_ms`).
            let own_again = how == How::Resumed && Some(grant.worker_id) == issued_under;
            if let Some(id) = issued_under {
                if !(matches!(how, How::Held | How::Reasserted) || own_again)
                    || grant.worker_id != id
                {
                    // Someone else held it in between: whatever they issued may overlap
                    // with what this run issues next.
                    return lost(id);
                }
            }
            Decision {
                standing: Standing::Holding {
                    worker_id: grant.worker_id,
                    fence_ms,
                    term,
                },
                resume_after_ms: if issued_under.is_some() && !own_again {
                    0
                } else {
                    grant.resume_after_ms(skew_ms)
                },
            }
        }
        // A holder keeps its fence: it re-asserts while its lease is live, and is told the id
        // is gone once the hold-off has ended, if it is.
        Answer::HoldingOff { until_ms, cause } => match issued_under {
            Some(_) => keep(),
            None => refuse(Refusal::HoldingOff { until_ms, cause }),
        },
        // The registry took nothing of this claim: a holder keeps its fence (and stops at it
        // unless the clocks come to agree); a run holding nothing issues nothing.
        Answer::ClockAhead {
            ahead_ms,
            allowed_ms,
        } => match issued_under {
            Some(_) => keep(),
            None => refuse(Refusal::ClockAhead {
                ahead_ms,
                allowed_ms,
            }),
        },
        Answer::Conflict {
            worker_id,
            other,
            other_lease_ends_ms,
        } => match issued_under {
            Some(id) => lost(id),
            None => refuse(Refusal::Conflict {
                worker_id,
                other,
                other_lease_ends_ms,
            }),
        },
        Answer::Exhausted => refuse(Refusal::Exhausted),
        Answer::WrongIdSpace { .. } => unreachable!("refused above, whatever the run held"),
        Answer::OverQuota {
            held,
            quota,
            holding,
            first_ends_ms,
            own_earlier_run,
        } => match issued_under {
            Some(id) => lost(id),
            None => refuse(Refusal::OverQuota {
                held,
                quota,
                holding,
                first_ends_ms,
                own_earlier_run,
            }),
        },
    }
}

/// The term a holder sends with its claim to re-assert its lease, should the registry have
/// begun another since (a failover that may have lost it): its own term while its fence lies
/// more than twice the clock skew ahead of `now_ms` (its clock), so that by the registry's clock
/// too the lease it held had not ended, and no other holder can have been given the id in a
/// history the registry lost. None otherwise: the claim is then a new one, held off like any.
pub fn reassert_term(standing: &Standing, now_ms: u64, skew_ms: u64) -> Option<u64> {
    match standing {
        Standing::Holding { fence_ms, term, .. }
            if *fence_ms > now_ms.saturating_add(skew_ms.saturating_mul(2)) =>
        {
            Some(*term)
        }
        _ => None,
    }
}

/// The registry could not be asked (unreachable, misconfigured): what the run does meanwhile.
/// A held lease keeps its fence (fenced ids stop at the lease's end; a fixed id under `issue`
/// has none and carries on); a fixed id never verified issues only if `issue_unverified`.
pub fn decide_unanswered(mode: Mode, before: &Standing, issue_unverified: bool) -> Standing {
    match before {
        Standing::Holding { .. } | Standing::Refused(_) | Standing::Unverified => before.clone(),
        Standing::Pending => match mode {
            Mode::Fixed(_) if issue_unverified => Standing::Unverified,
            _ => Standing::Refused(Refusal::NeverVerified),
        },
    }
}

/// How long after a successful claim the next renewal is due: a third of the lease, so two
/// renewals can fail before an automatic id stops.
pub fn renewal_interval_ms(lease_ms: u64) -> u64 {
    (lease_ms / 3).max(1)
}

/// How soon a failed claim is tried again.
pub fn retry_interval_ms(lease_ms: u64) -> u64 {
    (lease_ms / 10).clamp(100, 1000)
}

/// Whether a registry that still keeps an id for another holder whose lease ended at
/// `other_lease_ends_ms` (the registry's clock) keeps it past that end by more than the clocks may
/// differ (`skew_ms`) at `now_ms` (this server's clock): then the registry keeps it for a reason
/// of its own (an unfenced lease), not because the lease may still run.
pub fn kept_past_its_end(other_lease_ends_ms: u64, skew_ms: u64, now_ms: u64) -> bool {
    other_lease_ends_ms.saturating_add(skew_ms) < now_ms
}

/// `text` with every character outside printable ASCII written as an escape (`\n`, `\u{202e}`):
/// what another registry member wrote (its server's name) reaches this server's log and errors
/// only so, whatever the registry let through.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c.to_string()
            } else {
                c.escape_default().to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_conflict_is_kept_past_its_end_only_beyond_the_clock_skew() {
        assert!(
            !kept_past_its_end(1_000, 500, 1_500),
            "at the end plus the skew: may still run"
        );
        assert!(kept_past_its_end(1_000, 500, 1_501));
        assert!(!kept_past_its_end(u64::MAX, 500, u64::MAX), "no overflow");
    }

    #[test]
    fn another_members_text_reaches_this_servers_log_with_no_control_character() {
        assert_eq!(printable("db1@host:5432"), "db1@host:5432");
        assert_eq!(
            printable("x\nLOG:  forged\r\u{202e}\u{7f}\té"),
            "x\\nLOG:  forged\\r\\u{202e}\\u{7f}\\t\\u{e9}"
        );
    }

    proptest! {
        #[test]
        fn printable_text_has_only_printable_ascii(text in ".*") {
            prop_assert!(printable(&text).chars().all(|c| c == ' ' || c.is_ascii_graphic()));
        }
    }

    fn grant(worker_id: u16, how: How, horizon: u64, predecessor: u64) -> Answer {
        Answer::Granted {
            how,
            grant: Grant {
                worker_id,
                lease_ends_ms: 0,
                last_horizon_ms: horizon,
                predecessor_ends_ms: predecessor,
                predecessor_fence_ms: 0,
            },
            previous: None,
        }
    }

    #[test]
    fn renewals_come_every_third_of_the_lease_and_retries_within_a_second() {
        // Two renewals can fail before an automatic id stops; a failed claim is retried soon,
        // but never more than ten times a second.
        assert_eq!(renewal_interval_ms(30_000), 10_000);
        assert_eq!(renewal_interval_ms(3_000), 1_000);
        assert_eq!(renewal_interval_ms(2), 1);
        assert_eq!(retry_interval_ms(30_000), 1_000);
        assert_eq!(retry_interval_ms(3_000), 300);
        assert_eq!(retry_interval_ms(500), 100);
    }

    #[test]
    fn worker_id_settings_parse() {
        assert_eq!(parse_worker_id(""), Ok(None));
        assert_eq!(parse_worker_id("-1"), Ok(None));
        assert_eq!(parse_worker_id("auto"), Ok(Some(Mode::Auto)));
        assert_eq!(parse_worker_id(" AUTO "), Ok(Some(Mode::Auto)));
        assert_eq!(parse_worker_id("0"), Ok(Some(Mode::Fixed(0))));
        assert_eq!(parse_worker_id("1023"), Ok(Some(Mode::Fixed(1023))));
        // the widest worker field (Sonyflake's 16 bits); the server checks its own layout's
        assert_eq!(parse_worker_id("65535"), Ok(Some(Mode::Fixed(65535))));
        for bad in ["65536", "-2", "4.5", "automatic", "0x10"] {
            assert!(parse_worker_id(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn a_password_in_the_connection_string_is_refused() {
        assert!(check_conninfo([("host", "h"), ("password", "s3cret")]).is_err());
        assert!(check_conninfo([("sslpassword", "key-pass")]).is_err());
        assert!(check_conninfo([("host", "h"), ("password", "")]).is_ok());
        assert!(check_conninfo([("host", "h"), ("passfile", "/x/pgpass")]).is_ok());
    }

    #[test]
    fn a_lease_is_fenced_at_the_send_time_plus_the_lease_unless_a_fixed_id_issues_unconfirmed() {
        let d = decide(
            Mode::Auto,
            &Standing::Pending,
            grant(7, How::Claimed, 0, 0),
            1_000,
            30_000,
            500,
        );
        assert_eq!(
            d.standing,
            Standing::Holding {
                worker_id: 7,
                fence_ms: 31_000,
                term: 0,
            }
        );
        assert_eq!(d.resume_after_ms, 0);
        // A fixed id is fenced as an automatic one is (the default, refuse): its lease, once
        // ended, may go to another server.
        let fixed = decide(
            Mode::Fixed(7),
            &Standing::Pending,
            grant(7, How::Claimed, 0, 0),
            1_000,
            30_000,
            500,
        );
        assert_eq!(
            fixed.standing,
            Standing::Holding {
                worker_id: 7,
                fence_ms: 31_000,
                term: 0,
            }
        );
        // Under idgen.unverified_worker_id = issue it carries on without the registry: no fence,
        // and the claim says so (its lease never goes to another server by itself).
        let unconfirmed = Policy {
            mode: Mode::Fixed(7),
            issue_unconfirmed: true,
            grace_ms: 0,
        };
        let fixed = decide(
            unconfirmed,
            &Standing::Pending,
            grant(7, How::Claimed, 0, 0),
            1_000,
            30_000,
            500,
        );
        assert_eq!(
            fixed.standing,
            Standing::Holding {
                worker_id: 7,
                fence_ms: u64::MAX,
                term: 0,
            }
        );
        assert_eq!(unconfirmed.fence_ms(1_000, 30_000, None), None);
        assert_eq!(
            Policy::from(Mode::Fixed(7)).fence_ms(1_000, 30_000, None),
            Some(31_000)
        );
        assert_eq!(
            Policy::from(Mode::Auto).fence_ms(1_000, 30_000, None),
            Some(31_000)
        );
        let auto_told_to_issue = Policy {
            mode: Mode::Auto,
            issue_unconfirmed: true,
            grace_ms: 0,
        };
        assert!(
            auto_told_to_issue.fenced(),
            "an automatic id is always fenced"
        );
    }

    #[test]
    fn a_takeover_resumes_after_the_old_lease_plus_skew_or_the_horizon() {
        let d = decide(
            Mode::Auto,
            &Standing::Pending,
            grant(3, How::TakenOver, 5_000, 9_000),
            20_000,
            30_000,
            1_000,
        );
        assert_eq!(d.resume_after_ms, 10_000);
        let d = decide(
            Mode::Auto,
            &Standing::Pending,
            grant(3, How::TakenOver, 12_000, 9_000),
            20_000,
            30_000,
            1_000,
        );
        assert_eq!(d.resume_after_ms, 12_000);
        // A restart of the holder after a takeover keeps the floor.
        let d = decide(
            Mode::Fixed(3),
            &Standing::Pending,
            grant(3, How::Held, 5_000, 9_000),
            20_000,
            30_000,
            1_000,
        );
        assert_eq!(d.resume_after_ms, 10_000);
    }

    #[test]
    fn a_renewal_that_finds_the_id_changed_hands_stops_the_run() {
        let holding = Standing::Holding {
            worker_id: 3,
            fence_ms: 50,
            term: 0,
        };
        for answer in [
            grant(3, How::TakenOver, 0, 40),
            grant(4, How::Claimed, 0, 0),
            Answer::Conflict {
                worker_id: 3,
                other: "b".into(),
                other_lease_ends_ms: 99,
            },
        ] {
            let d = decide(Mode::Auto, &holding, answer, 60, 30, 5);
            assert_eq!(
                d.standing,
                Standing::Refused(Refusal::Lost {
                    worker_id: 3,
                    forgotten: false
                })
            );
        }
        // and it stays stopped, whatever comes next
        let lost = Standing::Refused(Refusal::Lost {
            worker_id: 3,
            forgotten: false,
        });
        let d = decide(Mode::Auto, &lost, grant(3, How::Held, 0, 0), 70, 30, 5);
        assert_eq!(d.standing, lost);
        // a plain renewal extends the fence and sets no floor
        let d = decide(Mode::Auto, &holding, grant(3, How::Held, 0, 40), 60, 30, 5);
        assert_eq!(
            d,
            Decision {
                standing: Standing::Holding {
                    worker_id: 3,
                    fence_ms: 90,
                    term: 0,
                },
                resume_after_ms: 0
            }
        );
    }

    #[test]
    fn a_lease_with_a_grace_is_fenced_past_the_lease_by_the_grace() {
        let policy = Policy {
            mode: Mode::Auto,
            issue_unconfirmed: false,
            grace_ms: 600_000,
        };
        assert_eq!(policy.fence_ms(1_000, 30_000, None), Some(631_000));
        let d = decide(
            policy,
            &Standing::Pending,
            grant(7, How::Claimed, 0, 0),
            1_000,
            30_000,
            500,
        );
        assert_eq!(
            d.standing,
            Standing::Holding {
                worker_id: 7,
                fence_ms: 631_000,
                term: 0
            }
        );
    }

    #[test]
    fn a_registry_holding_off_refuses_a_new_run_and_keeps_a_holder_until_it_answers() {
        let off = Reply {
            answer: Answer::HoldingOff {
                until_ms: 9_000,
                cause: TermCause::NewTimeline,
            },
            term: 2,
            granted: None,
        };
        let d = decide(Mode::Auto, &Standing::Pending, off.clone(), 100, 30, 5);
        assert_eq!(
            d.standing,
            Standing::Refused(Refusal::HoldingOff {
                until_ms: 9_000,
                cause: TermCause::NewTimeline,
            })
        );
        let holding = Standing::Holding {
            worker_id: 3,
            fence_ms: 500,
            term: 1,
        };
        assert_eq!(
            decide(Mode::Auto, &holding, off.clone(), 100, 30, 5).standing,
            holding
        );
        // a fixed id issued on unverified is neither confirmed nor refuted by it
        let issue = Policy {
            mode: Mode::Fixed(3),
            issue_unconfirmed: true,
            grace_ms: 0,
        };
        assert_eq!(
            decide(issue, &Standing::Unverified, off, 100, 30, 5).standing,
            Standing::Unverified
        );
    }

    #[test]
    fn a_holder_fences_at_the_lease_and_grace_the_registry_granted_not_at_its_own() {
        let policy = Policy {
            mode: Mode::Auto,
            issue_unconfirmed: false,
            grace_ms: 40_000,
        };
        let reply = |granted| Reply {
            answer: grant(3, How::Claimed, 0, 0),
            term: 1,
            granted,
        };
        let fence =
            |granted| match decide(policy, &Standing::Pending, reply(granted), 1_000, 3_000, 5)
                .standing
            {
                Standing::Holding { fence_ms, .. } => fence_ms,
                other => panic!("{other:?}"),
            };
        // the registry lowered its bounds below this server's: its fence follows the grant
        let lowered = Granted {
            lease_ms: 3_000,
            grace_ms: 15_000,
        };
        assert_eq!(fence(Some(lowered)), 1_000 + 3_000 + 15_000);
        // granted in full, or said nothing of it: its own lease and grace
        let full = Granted {
            lease_ms: 3_000,
            grace_ms: 40_000,
        };
        assert_eq!(fence(Some(full)), 44_000);
        assert_eq!(fence(None), 44_000);
        // a grant is never taken as more than asked for
        let more = Granted {
            lease_ms: 60_000,
            grace_ms: 900_000,
        };
        assert_eq!(fence(Some(more)), 44_000);
    }

    #[test]
    fn a_clock_ahead_of_the_registrys_refuses_a_new_run_and_leaves_a_holders_fence_as_it_was() {
        let ahead = || Answer::ClockAhead {
            ahead_ms: 5_000,
            allowed_ms: 1_000,
        };
        assert_eq!(
            decide(Mode::Auto, &Standing::Pending, ahead(), 100, 30, 5).standing,
            Standing::Refused(Refusal::ClockAhead {
                ahead_ms: 5_000,
                allowed_ms: 1_000
            })
        );
        let holding = Standing::Holding {
            worker_id: 3,
            fence_ms: 500,
            term: 1,
        };
        assert_eq!(
            decide(Mode::Auto, &holding, ahead(), 100, 30, 5).standing,
            holding
        );
    }

    #[test]
    fn a_term_cause_reads_back_from_the_registrys_word_and_from_shared_memory() {
        for cause in [
            TermCause::Installed,
            TermCause::NewTimeline,
            TermCause::Restored,
            TermCause::Started,
            TermCause::HoldOff,
        ] {
            assert_eq!(TermCause::from_code(cause.code()), cause);
        }
        assert_eq!(TermCause::parse("restored"), TermCause::Restored);
        assert_eq!(TermCause::parse("new timeline"), TermCause::NewTimeline);
        // a word this idgen does not know: a start, whose hold-off is as long as any
        assert_eq!(TermCause::parse("meteor"), TermCause::Started);
    }

    #[test]
    fn a_run_stopped_at_its_fence_takes_its_own_id_back_in_a_new_term_above_the_floor_and_no_other()
    {
        let stopped = Standing::Holding {
            worker_id: 3,
            fence_ms: 500,
            term: 1,
        };
        let back = |id, how| Reply {
            answer: Answer::Granted {
                how,
                previous: None,
                grant: Grant {
                    worker_id: id,
                    lease_ends_ms: 9_000,
                    last_horizon_ms: 400,
                    predecessor_ends_ms: 7_000,
                    predecessor_fence_ms: 0,
                },
            },
            term: 2,
            granted: None,
        };
        let d = decide(
            Mode::Auto,
            &stopped,
            back(3, How::Resumed),
            6_000,
            3_000,
            500,
        );
        assert_eq!(
            d,
            Decision {
                standing: Standing::Holding {
                    worker_id: 3,
                    fence_ms: 9_000,
                    term: 2
                },
                resume_after_ms: 7_500,
            }
        );
        // another id, or its own taken over from another holder, is lost
        for (id, how) in [(4, How::Resumed), (3, How::TakenOver), (3, How::Claimed)] {
            assert_eq!(
                decide(Mode::Auto, &stopped, back(id, how), 6_000, 3_000, 500).standing,
                Standing::Refused(Refusal::Lost {
                    worker_id: 3,
                    forgotten: true
                })
            );
        }
    }

    #[test]
    fn a_holder_re_asserts_its_lease_in_a_new_term_and_keeps_issuing_under_it() {
        let holding = Standing::Holding {
            worker_id: 3,
            fence_ms: 500,
            term: 1,
        };
        let reply = Reply {
            answer: grant(3, How::Reasserted, 0, 0),
            term: 2,
            granted: None,
        };
        let d = decide(Mode::Auto, &holding, reply, 100, 30, 5);
        assert_eq!(
            d,
            Decision {
                standing: Standing::Holding {
                    worker_id: 3,
                    fence_ms: 130,
                    term: 2
                },
                resume_after_ms: 0
            }
        );
    }

    #[test]
    fn a_lease_lost_across_a_new_term_says_the_registry_forgot_it() {
        let holding = Standing::Holding {
            worker_id: 3,
            fence_ms: 500,
            term: 1,
        };
        let taken = |term| Reply {
            answer: Answer::Conflict {
                worker_id: 3,
                other: "b".into(),
                other_lease_ends_ms: 99,
            },
            term,
            granted: None,
        };
        assert_eq!(
            decide(Mode::Auto, &holding, taken(2), 100, 30, 5).standing,
            Standing::Refused(Refusal::Lost {
                worker_id: 3,
                forgotten: true
            })
        );
        assert_eq!(
            decide(Mode::Auto, &holding, taken(1), 100, 30, 5).standing,
            Standing::Refused(Refusal::Lost {
                worker_id: 3,
                forgotten: false
            })
        );
    }

    #[test]
    fn a_holder_re_asserts_only_while_its_fence_is_beyond_twice_the_skew() {
        let holding = Standing::Holding {
            worker_id: 3,
            fence_ms: 10_000,
            term: 7,
        };
        assert_eq!(reassert_term(&holding, 7_999, 1_000), Some(7));
        assert_eq!(reassert_term(&holding, 8_000, 1_000), None);
        assert_eq!(reassert_term(&Standing::Pending, 0, 0), None);
        assert_eq!(reassert_term(&Standing::Unverified, 0, 0), None);
    }

    #[test]
    fn a_conflict_at_start_names_the_other_holder() {
        let answer = Answer::Conflict {
            worker_id: 5,
            other: "b@host".into(),
            other_lease_ends_ms: 77,
        };
        let d = decide(Mode::Fixed(5), &Standing::Pending, answer, 1, 30, 5);
        assert_eq!(
            d.standing,
            Standing::Refused(Refusal::Conflict {
                worker_id: 5,
                other: "b@host".into(),
                other_lease_ends_ms: 77
            })
        );
        let d = decide(Mode::Auto, &Standing::Pending, Answer::Exhausted, 1, 30, 5);
        assert_eq!(d.standing, Standing::Refused(Refusal::Exhausted));
    }

    #[test]
    fn a_registry_of_another_id_space_is_refused_whatever_the_run_held_and_names_its_space() {
        let wrong = || Answer::WrongIdSpace {
            registry_layout: "instagram".into(),
            registry_epoch_ms: 1_314_220_021_721,
        };
        let refused = Standing::Refused(Refusal::WrongIdSpace {
            registry_layout: "instagram".into(),
            registry_epoch_ms: 1_314_220_021_721,
        });
        let holding = Standing::Holding {
            worker_id: 3,
            fence_ms: 99,
            term: 0,
        };
        for (mode, before) in [
            (Mode::Auto, Standing::Pending),
            (Mode::Auto, holding.clone()),
            (Mode::Fixed(3), Standing::Pending),
            (Mode::Fixed(3), holding),
            (Mode::Fixed(3), Standing::Unverified),
        ] {
            let d = decide(mode, &before, wrong(), 1, 30, 5);
            assert_eq!(d.standing, refused, "{mode:?} from {before:?}");
            assert_eq!(d.resume_after_ms, 0);
        }
    }

    #[test]
    fn an_unverified_fixed_id_is_confirmed_by_a_first_claim_or_refused_on_a_clash() {
        // Only idgen.unverified_worker_id = issue issues unverified, and it stays unfenced.
        let issue = Policy {
            mode: Mode::Fixed(4),
            issue_unconfirmed: true,
            grace_ms: 0,
        };
        for how in [How::Claimed, How::Held] {
            let d = decide(issue, &Standing::Unverified, grant(4, how, 0, 0), 1, 30, 5);
            assert_eq!(
                d.standing,
                Standing::Holding {
                    worker_id: 4,
                    fence_ms: u64::MAX,
                    term: 0,
                }
            );
            assert_eq!(
                d.resume_after_ms, 0,
                "ids were issued already: no floor under them"
            );
        }
        let other = Answer::Conflict {
            worker_id: 4,
            other: "b".into(),
            other_lease_ends_ms: 9,
        };
        let d = decide(issue, &Standing::Unverified, other, 1, 30, 5);
        assert!(
            matches!(d.standing, Standing::Refused(Refusal::Conflict { .. })),
            "{d:?}"
        );
        let d = decide(
            issue,
            &Standing::Unverified,
            grant(4, How::TakenOver, 0, 1),
            1,
            30,
            5,
        );
        assert_eq!(
            d.standing,
            Standing::Refused(Refusal::Lost {
                worker_id: 4,
                forgotten: false
            })
        );
    }

    #[test]
    fn the_old_holders_own_fence_bounds_the_floor_too() {
        let g = Grant {
            worker_id: 1,
            lease_ends_ms: 0,
            last_horizon_ms: 100,
            predecessor_ends_ms: 1_000,
            predecessor_fence_ms: 1_900,
        };
        assert_eq!(
            g.resume_after_ms(500),
            1_900,
            "a fast-clocked old holder fenced itself past end + skew"
        );
        assert_eq!(g.resume_after_ms(1_000), 2_000);
    }

    #[test]
    fn an_answer_over_the_roles_quota_refuses_a_new_run_and_stops_one_that_held_an_id() {
        let over = || Answer::OverQuota {
            held: 1,
            quota: 1,
            holding: "a@h:1 (worker id 3)".into(),
            first_ends_ms: 9,
            own_earlier_run: false,
        };
        let refused = Standing::Refused(Refusal::OverQuota {
            held: 1,
            quota: 1,
            holding: "a@h:1 (worker id 3)".into(),
            first_ends_ms: 9,
            own_earlier_run: false,
        });
        for (mode, before) in [
            (Mode::Auto, Standing::Pending),
            (Mode::Fixed(4), Standing::Pending),
            (Mode::Fixed(4), Standing::Unverified),
        ] {
            assert_eq!(decide(mode, &before, over(), 1, 30, 5).standing, refused);
        }
        let held = Standing::Holding {
            worker_id: 4,
            fence_ms: 31,
            term: 0,
        };
        assert_eq!(
            decide(Mode::Auto, &held, over(), 2, 30, 5).standing,
            Standing::Refused(Refusal::Lost {
                worker_id: 4,
                forgotten: false
            })
        );
    }

    #[test]
    fn without_an_answer_only_a_verified_or_allowed_fixed_id_issues() {
        let p = Standing::Pending;
        assert_eq!(
            decide_unanswered(Mode::Fixed(1), &p, false),
            Standing::Refused(Refusal::NeverVerified)
        );
        assert_eq!(
            decide_unanswered(Mode::Fixed(1), &p, true),
            Standing::Unverified
        );
        assert_eq!(
            decide_unanswered(Mode::Auto, &p, true),
            Standing::Refused(Refusal::NeverVerified)
        );
        let held = Standing::Holding {
            worker_id: 1,
            fence_ms: 9,
            term: 0,
        };
        assert_eq!(decide_unanswered(Mode::Auto, &held, false), held);
    }

    /// One worker id's row in the registry and what `claim()` (sql/registry/idgen_registry.sql)
    /// makes of it, stated here so that a property test can try the rule under any clocks;
    /// `test_a_third_holder_resumes_above_a_fast_clocked_first_one` (pg_test/test_registry.py)
    /// checks that the SQL keeps the same rule.
    #[derive(Debug, Clone, Copy)]
    struct Row {
        lease_ends_ms: u64,
        fence_ms: u64,
        last_horizon_ms: u64,
        predecessor_ends_ms: u64,
        predecessor_fence_ms: u64,
    }

    impl Row {
        /// Never leased before: claimed at `now` (the registry's clock).
        fn claimed(now: u64, lease: u64, fence: u64, horizon: u64) -> Row {
            Row {
                lease_ends_ms: now + lease,
                fence_ms: fence,
                last_horizon_ms: horizon,
                predecessor_ends_ms: 0,
                predecessor_fence_ms: 0,
            }
        }

        /// Taken over at `now`, after the lease ended: the new holder inherits the latest end
        /// and the highest fence of every holder before it, not only of the last one.
        fn taken_over(&self, now: u64, lease: u64, fence: u64, horizon: u64) -> Row {
            Row {
                lease_ends_ms: now + lease,
                fence_ms: fence,
                last_horizon_ms: self.last_horizon_ms.max(horizon),
                predecessor_ends_ms: self.predecessor_ends_ms.max(self.lease_ends_ms),
                predecessor_fence_ms: self.predecessor_fence_ms.max(self.fence_ms),
            }
        }

        fn answer(&self, how: How) -> Answer {
            Answer::Granted {
                how,
                grant: Grant {
                    worker_id: 9,
                    lease_ends_ms: self.lease_ends_ms,
                    last_horizon_ms: self.last_horizon_ms,
                    predecessor_ends_ms: self.predecessor_ends_ms,
                    predecessor_fence_ms: self.predecessor_fence_ms,
                },
                previous: None,
            }
        }
    }

    proptest! {
        /// Two holders of one id in turn, clocks off the registry's by at most `skew` each way,
        /// the first with an automatic or a (fenced) fixed id: every id millisecond the first
        /// could issue (below its fence) is below every one the second may issue (after its
        /// floor).
        #[test]
        fn a_reused_id_never_overlaps_its_last_holder(
            first_fixed in any::<bool>(),
            lease in 1_000u64..100_000,
            skew in 0u64..5_000,
            offset_a in -5_000i64..5_000,
            offset_b in -5_000i64..5_000,
            registry_send in 1_000_000u64..2_000_000,
            delay in 0u64..2_000,
            horizon_lag in 0u64..200_000,
            gap in 1u64..100_000,
        ) {
            let offset_a = offset_a.clamp(-(skew as i64), skew as i64);
            let offset_b = offset_b.clamp(-(skew as i64), skew as i64);
            // A sends its last renewal at registry time `registry_send`; the registry receives
            // it `delay` later and ends the lease `lease` after that.
            let a_sent = registry_send.checked_add_signed(offset_a).unwrap();
            let mode = if first_fixed { Mode::Fixed(9) } else { Mode::Auto };
            let a = decide(mode, &Standing::Pending, grant(9, How::Claimed, 0, 0), a_sent, lease, skew);
            let Standing::Holding { fence_ms, .. } = a.standing else { panic!("{a:?}") };
            prop_assert!(fence_ms < u64::MAX, "{mode:?} is not fenced");
            let registry_end = registry_send + delay + lease;
            // Everything A issued is below its fence; its last recorded horizon is older.
            let last_issued = fence_ms - 1;
            let recorded_horizon = last_issued.saturating_sub(horizon_lag);
            // B takes the id over after the registry's end, by the registry's clock.
            let b_sent = (registry_end + gap).checked_add_signed(offset_b).unwrap();
            let b = decide(Mode::Auto, &Standing::Pending,
                grant(9, How::TakenOver, recorded_horizon, registry_end), b_sent, lease, skew);
            prop_assert!(b.resume_after_ms >= last_issued,
                "B resumes after {} but A may have issued at {}", b.resume_after_ms, last_issued);
        }

        /// Three holders of one id in turn, A's clock ahead of the registry's by more than the
        /// allowed skew (up to the 10 minutes `claim()` accepts), B's and C's within it: C
        /// resumes above every millisecond A or B could have issued in, even when B, its
        /// clock behind A's fence, issued nothing and fenced itself below A.
        #[test]
        fn a_third_holder_resumes_above_a_fast_clocked_first_one(
            lease in 1_000u64..100_000,
            skew in 0u64..5_000,
            ahead in 1u64..600_000,
            offset_b in -5_000i64..5_000,
            offset_c in -5_000i64..5_000,
            t0 in 1_000_000u64..2_000_000,
            delay in 0u64..2_000,
            horizon_lag in 0u64..700_000,
            gap_b in 1u64..100_000,
            gap_c in 1u64..100_000,
        ) {
            let offset_b = offset_b.clamp(-(skew as i64), skew as i64);
            let offset_c = offset_c.clamp(-(skew as i64), skew as i64);
            // A's last renewal, sent at registry time t0 by a clock `skew + ahead` fast.
            let a_sent = t0 + skew + ahead;
            let a = decide(Mode::Auto, &Standing::Pending, Row::claimed(0, 0, 0, 0).answer(How::Claimed),
                a_sent, lease, skew);
            let Standing::Holding { fence_ms: a_fence, .. } = a.standing else { panic!("{a:?}") };
            let a_last = a_fence - 1;
            let row = Row::claimed(t0 + delay, lease, a_fence, a_last.saturating_sub(horizon_lag));
            // B takes the id over once the registry has ended A's lease.
            let t_b = row.lease_ends_ms + gap_b;
            let row = row.taken_over(t_b, lease, 0, 0);
            let b_sent = t_b.checked_add_signed(offset_b).unwrap();
            let b = decide(Mode::Auto, &Standing::Pending, row.answer(How::TakenOver), b_sent, lease, skew);
            let Standing::Holding { fence_ms: b_fence, .. } = b.standing else { panic!("{b:?}") };
            prop_assert!(b.resume_after_ms >= a_last);
            // B issues between its floor and its fence, if there is room.
            let b_last = (b_fence - 1 > b.resume_after_ms).then_some(b_fence - 1);
            let row = Row { fence_ms: b_fence, ..row };
            // C takes the id over once the registry has ended B's lease.
            let t_c = row.lease_ends_ms + gap_c;
            let row = row.taken_over(t_c, lease, 0, 0);
            let c_sent = t_c.checked_add_signed(offset_c).unwrap();
            let c = decide(Mode::Auto, &Standing::Pending, row.answer(How::TakenOver), c_sent, lease, skew);
            prop_assert!(c.resume_after_ms >= a_last,
                "C resumes after {} but A may have issued at {}", c.resume_after_ms, a_last);
            if let Some(b_last) = b_last {
                prop_assert!(c.resume_after_ms >= b_last,
                    "C resumes after {} but B may have issued at {}", c.resume_after_ms, b_last);
            }
        }
    }
}
