//! Codes that carry the worker id (worker_code_next()), for fleets with no registry: the number
//! behind a code is `counter * workers + worker_id` (`idgen_core::short_code::worker_number`),
//! where the counter is a sequence of this server's, so two servers with different worker ids
//! never make the same code, and a code is as short as the fleet's size allows.
//!
//! The counter is taken in blocks, as a sequence's CACHE does: each backend takes a block with
//! one nextval of a sequence whose INCREMENT is the block size (the numbers up to the value it
//! gave, so that blocks tile however the increment changes), and waits for the WAL to be
//! flushed (and confirmed by the synchronous standbys) before it hands out a code of it, as the
//! snowflake horizon does. A crash or a failover to a synchronous standby never reissues a code;
//! a backend that ends leaves the rest of its block unused (a gap, never a duplicate). A sequence
//! set back (RESTART, setval) or made anew hands its codes out again, as it would its values.

use crate::pg::errors::{self, error};
use crate::pg::{clock, horizon_store, registry, settings, shared};
use idgen_core::lease::Mode;
use idgen_core::short_code::{self, Block};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    /// This backend's block of each counter sequence (by its oid).
    static BLOCKS: RefCell<HashMap<pg_sys::Oid, Block>> = RefCell::new(HashMap::new());
}

/// The number of the next code of sequence `seq` (named `name` in errors, of persistence
/// `persistence`) at `width` digits.
pub fn next(seq: pg_sys::Oid, name: &str, persistence: u8, width: i32) -> u64 {
    let what = "worker_code_next()";
    let worker_id = match settings::worker_mode() {
        Some(Mode::Fixed(id)) => u64::from(id),
        Some(Mode::Auto) => error(errors::NOT_IN_PREREQUISITE_STATE, format!("{what} needs a fixed idgen.worker_id, and this server's is auto"))
            .detail("The code carries the worker id beside a counter of this server's: a worker id leased anew at each start could be one another server made codes with before, from the same counter values.")
            .hint("Give each server a fixed idgen.worker_id of its own for good; with a registry, short_code_next() makes denser codes.")
            .raise(),
        None => {
            settings::worker_mode_or_raise();
            unreachable!("worker_mode_or_raise raises when unset")
        }
    };
    if !(1..=11).contains(&width) {
        error(
            errors::INVALID_PARAMETER,
            format!("width {width} is not one a code can have"),
        )
        .hint("Give 1 to 11 digits; 7 gives each of 1,024 worker ids 3,439,076,763 codes.")
        .raise();
    }
    if shared::in_recovery() {
        error(
            errors::READ_ONLY_TRANSACTION,
            format!("{what} issues no code on a standby"),
        )
        .hint("Call it on the primary.")
        .raise();
    }
    // A temporary sequence is one session's, an unlogged one starts again after a crash: either
    // would hand out a code twice.
    if persistence != pg_sys::RELPERSISTENCE_PERMANENT {
        error(
            errors::INVALID_PARAMETER,
            format!("sequence {name} is temporary or unlogged, and would hand out a code twice"),
        )
        .hint("Give worker_code_next() a plain (logged, permanent) sequence of this server's.")
        .raise();
    }
    // With a registry, a fixed id makes codes only while the registry confirms it, as it makes
    // snowflake ids: another server given the same id would make the same codes.
    if settings::registry().is_some() && shared::preloaded() {
        let confirmed = registry::permit(Mode::Fixed(worker_id as u16))
            .ok()
            .filter(|p| p.fence_ms == registry::NO_LIMIT || p.fence_ms > clock::now_unix_ms());
        if confirmed.is_none() {
            error(errors::NOT_IN_PREREQUISITE_STATE, format!("{what} issues no code: the registry does not confirm worker id {worker_id} now"))
                .detail("With idgen.registry set, a fixed worker id makes codes only while its lease holds, as it makes snowflake ids; idgen_lease_status() says where it stands.")
                .hint("With a registry, short_code_next() makes denser codes and needs no worker id.")
                .raise();
        }
    }
    let workers = settings::layout().max_worker() + 1;
    let counter = BLOCKS.with(|blocks| {
        let mut blocks = blocks.borrow_mut();
        let block = blocks.entry(seq).or_default();
        if block.is_empty() {
            *block = take_block(seq, name);
        }
        let n = block.start;
        block.start += 1;
        n
    });
    short_code::worker_number(counter, worker_id, workers, width as u32).unwrap_or_else(|| {
        error(errors::NUMERIC_OUT_OF_RANGE, format!(
            "counter {name} is at {counter}, past the {} codes of {width} digits each of this fleet's {workers} worker ids gets",
            short_code::codes_per_worker(width as u32, workers)))
            .hint("Move to a wider code (a larger width), for every server at once: codes of two widths do not sort together.")
            .raise()
    })
}

/// The sequence's increment, and whether it cycles.
fn shape(seq: pg_sys::Oid, name: &str) -> (i64, bool) {
    let shape = Spi::get_two::<i64, bool>(&format!(
        "SELECT seqincrement, seqcycle FROM pg_catalog.pg_sequence WHERE seqrelid OPERATOR(pg_catalog.=) {}::pg_catalog.oid",
        seq.to_u32()
    ));
    match shape {
        Ok((Some(i), Some(c))) => (i, c),
        _ => error(errors::INVALID_PARAMETER, format!("{name} is not a sequence"))
            .hint("Give worker_code_next() a sequence of this server's, e.g. CREATE SEQUENCE link_codes INCREMENT 1000 (a block of 1,000 codes per backend).")
            .raise(),
    }
}

/// A block of the sequence: the numbers up to and including the value nextval gave, as many as
/// its increment, so that the blocks of consecutive nextvals tile whatever the increment was or
/// becomes (an ALTER SEQUENCE between two takes, or during one: the smaller increment read).
fn take_block(seq: pg_sys::Oid, name: &str) -> Block {
    let (before, cycles) = shape(seq, name);
    if before < 1 || cycles {
        error(errors::INVALID_PARAMETER, format!("sequence {name} counts down or cycles, and would hand out a code twice"))
            .hint("Give worker_code_next() a sequence with a positive INCREMENT (the block size) and NO CYCLE.")
            .raise();
    }
    let last =
        unsafe { pgrx::direct_function_call::<i64>(pg_sys::nextval_oid, &[seq.into_datum()]) }
            .unwrap_or_else(|| {
                error(
                    errors::INVALID_PARAMETER,
                    format!("nextval() of {name} gave nothing"),
                )
                .raise()
            });
    let (after, _) = shape(seq, name);
    let increment = before.min(after).max(1) as u64;
    if let Err(e) = horizon_store::flush_wal() {
        error(errors::QUERY_CANCELED, format!("no code of {name} was issued: {e}"))
            .detail("A block of codes is handed out only once the WAL that records it is flushed and, with synchronous standbys, confirmed by them.")
            .raise();
    }
    let Ok(last) = u64::try_from(last) else {
        error(
            errors::NUMERIC_OUT_OF_RANGE,
            format!("sequence {name} gave {last}, and a code's counter is not negative"),
        )
        .hint("Give worker_code_next() a sequence that starts at 0 or above.")
        .raise();
    };
    Block {
        start: (last + 1).saturating_sub(increment),
        end: last + 1,
    }
}
