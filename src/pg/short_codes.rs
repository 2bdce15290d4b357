//! Short codes from the registry's counters, on the Postgres side: each counter's blocks in
//! shared memory (`idgen_core::short_code::Blocks`), which short_code_next() issues from under a
//! lock, and the block worker (`registry/blocks.rs`) fills. A backend that finds its counter's
//! spare missing and its block half used wakes the worker; one that finds no number at all
//! waits for the worker's answer, and raises what stands in the way if none comes.
//!
//! A counter's slot lives until the server stops: a crash or a restart drops the blocks in hand
//! (their rest is never issued: the registry hands out each block once), and the first code after
//! takes a new block.

use crate::pg::errors::{self, error};
use crate::pg::{clock, settings, shared};
use idgen_core::short_code::{Block, Blocks, Refused};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};

/// How many counters one server issues from (a slot each, taken at first use).
pub const SLOTS: usize = 16;
const NAME: usize = 40;
const TEXT: usize = 512;

#[derive(Clone, Copy)]
pub struct Slot {
    used: bool,
    name_len: u8,
    name: [u8; NAME],
    width: u8,
    block_size: u64,
    pub blocks: Blocks,
    /// A backend asks for a block (the worker clears it once it has one, or has an answer).
    wanted: bool,
    /// A backend found no number since the last block came, or the last grant lasted less
    /// than a second: the next call asks for twice as many blocks at once (`ask`, 1 to 64);
    /// half as many after a grant that lasted over ten seconds.
    starved: bool,
    ask: u8,
    last_grant_ms: u64,
    /// The worker's last try for this counter got no block: `text` says why. A backend that
    /// finds no number raises at once then, instead of waiting.
    failing: bool,
    /// When the worker may ask the registry again (Unix ms): a counter's pace, or a failure.
    retry_at_ms: u64,
    /// How long the registry's answers took, for the status view: the last one, and in all.
    last_take_us: u64,
    take_us: u64,
    text_len: usize,
    text: [u8; TEXT],
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            used: false,
            name_len: 0,
            name: [0; NAME],
            width: 0,
            block_size: 0,
            blocks: Blocks::default(),
            wanted: false,
            starved: false,
            ask: 1,
            last_grant_ms: 0,
            failing: false,
            retry_at_ms: 0,
            last_take_us: 0,
            take_us: 0,
            text_len: 0,
            text: [0; TEXT],
        }
    }
}

impl Slot {
    pub fn name(&self) -> &str {
        std::str::from_utf8(&self.name[..usize::from(self.name_len)]).unwrap_or("")
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.text[..self.text_len.min(TEXT)]).into_owned()
    }

    fn set_text(&mut self, text: &str) {
        let mut end = text.len().min(TEXT);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.text[..end].copy_from_slice(&text.as_bytes()[..end]);
        self.text_len = end;
    }
}

#[derive(Clone, Copy)]
pub struct Counters {
    slots: [Slot; SLOTS],
    /// The block worker's PGPROC (0: not running), whose latch a backend sets to wake it.
    worker_proc: usize,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            slots: [Slot::default(); SLOTS],
            worker_proc: 0,
        }
    }
}

// SAFETY: plain data; worker_proc is the address of a PGPROC, which lies in shared memory at
// the same address in every process of the server.
unsafe impl PGRXSharedMemory for Counters {}

static COUNTERS: PgLwLock<Counters> = unsafe { PgLwLock::new(c"idgen_short_codes") };

/// From `_PG_init` while preloading.
pub fn init() {
    pg_shmem_init!(COUNTERS);
}

/// A counter's name as the registry takes it: a lower-case letter, then up to 39 lower-case
/// letters, digits or underscores.
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= NAME
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// How long short_code_next() waits for the worker's first answer about a counter: a connection
/// and a call of 5 s each, and a restart of the worker.
const FIRST_BLOCK_WAIT_MS: u64 = 15_000;

/// At most how many numbers a backend takes from its server's block at once: it issues them
/// with no lock, and leaves the rest unused when it ends (a gap, never a duplicate).
pub const CHUNK: u64 = 32;

/// The next numbers of counter `name` for this backend (at most `CHUNK`, fewer near a block's
/// end or for small blocks), and their width: from the block in hand, else (waiting for the
/// block worker) from the next block; raises what stands in the way. `slot` is where the counter
/// was found last time (a hint, checked).
pub fn take(name: &str, slot: &mut Option<usize>) -> (Block, u32) {
    let what = "short_code_next()";
    if !shared::preloaded() {
        errors::not_preloaded(what);
    }
    if settings::registry().is_none() {
        error(errors::NOT_IN_PREREQUISITE_STATE, "short_code_next() takes blocks of numbers from the registry, and idgen.registry is not set")
            .detail("A counter lives in the registry (sql/registry/idgen_registry.sql), which hands each server of the fleet blocks of it, so that no two servers write the same code.")
            .hint("Set idgen.registry and create the counter there (SELECT idgen_registry.create_counter('links', 6)); on one server, base62_encode(nextval('a_sequence'), 6) does; on a fleet without a registry, worker_code_next().")
            .raise();
    }
    if !valid_name(name) {
        error(
            errors::INVALID_PARAMETER,
            format!("counter name \"{}\" is not one a counter can have", name.escape_default()),
        )
        .hint("A lower-case letter, then up to 39 lower-case letters, digits or underscores, as idgen_registry.create_counter() takes it.")
        .raise();
    }
    if shared::in_recovery() {
        error(
            errors::READ_ONLY_TRANSACTION,
            "short_code_next() issues no code on a standby",
        )
        .hint("Call it on the primary. After promotion this server takes blocks of its own.")
        .raise();
    }
    let mut waited_us = 0;
    loop {
        let (got, wake, stuck) = {
            let mut counters = COUNTERS.exclusive();
            let hinted =
                slot.filter(|&i| counters.slots[i].used && counters.slots[i].name() == name);
            let Some(i) = hinted.or_else(|| find_or_add(&mut counters, name)) else {
                drop(counters);
                error(errors::NOT_IN_PREREQUISITE_STATE, format!("this server issues codes of at most {SLOTS} counters, and counter {name} would be one more"))
                    .hint("Use fewer counters per server (a counter serves any number of tables), or restart the server to forget counters no longer used.")
                    .raise();
            };
            *slot = Some(i);
            let s = &mut counters.slots[i];
            let most = CHUNK.min((s.block_size / 8).max(1));
            let got = s.blocks.take_up_to(most);
            let wake = s.blocks.wants_block() && !s.wanted;
            if wake || got.is_none() {
                s.wanted = true;
            }
            if got.is_none() {
                s.starved = true;
            }
            let width = u32::from(s.width);
            // The slot is copied out only to say why there is no number.
            let stuck = if got.is_none() { Some(*s) } else { None };
            let worker = counters.worker_proc;
            (got.map(|b| (b, width)), wake.then_some(worker), stuck)
        };
        if let Some(worker) = wake {
            wake_worker(worker);
        }
        if let Some(got) = got {
            return got;
        }
        let stuck = stuck.expect("copied when there is no number");
        if stuck.failing || waited_us >= FIRST_BLOCK_WAIT_MS * 1000 {
            raise_no_block(name, &stuck, waited_us / 1000);
        }
        wake_worker(COUNTERS.share().worker_proc);
        unsafe { pg_sys::pg_usleep(1_000) };
        pg_sys::check_for_interrupts!();
        waited_us += 1_000;
    }
}

fn find_or_add(counters: &mut Counters, name: &str) -> Option<usize> {
    if let Some(i) = counters
        .slots
        .iter()
        .position(|s| s.used && s.name() == name)
    {
        return Some(i);
    }
    // A free slot, else one of a counter that never had a block and failed (a name the
    // registry lacks): no role fills the table with made-up names for good.
    let i = counters.slots.iter().position(|s| !s.used).or_else(|| {
        counters
            .slots
            .iter()
            .position(|s| s.failing && s.blocks.blocks_taken == 0)
    })?;
    let slot = &mut counters.slots[i];
    *slot = Slot::default();
    slot.used = true;
    slot.name_len = name.len() as u8;
    slot.name[..name.len()].copy_from_slice(name.as_bytes());
    Some(i)
}

fn wake_worker(proc_: usize) {
    if proc_ != 0 {
        // SAFETY: the worker's PGPROC, in shared memory; setting a latch is safe from any process.
        unsafe { pg_sys::SetLatch(&raw mut (*(proc_ as *mut pg_sys::PGPROC)).procLatch) };
    }
}

#[track_caller]
fn raise_no_block(name: &str, slot: &Slot, waited: u64) -> ! {
    let why = if slot.failing {
        slot.text()
    } else {
        format!(
            "the block worker has had no answer from the registry for {} s",
            waited / 1000
        )
    };
    let taken = slot.blocks.blocks_taken;
    error(
        errors::NOT_IN_PREREQUISITE_STATE,
        format!("short_code_next('{name}') has no number in hand: {why}"),
    )
    .detail(if taken > 0 {
        format!("This server issued {} codes of counter {name} from {taken} blocks; writes go on through a registry outage for as long as the blocks in hand last, and these are used up.", slot.blocks.issued)
    } else {
        format!("This server has not had a block of counter {name} since it started.")
    })
    .hint("Codes resume as soon as the registry grants a block. Check the registry and idgen.registry; idgen_short_code_status() shows each counter.")
    .raise()
}

// ---- the block worker's side -------------------------------------------------------------------

/// Called by the block worker when it starts: backends wake it through its latch.
pub fn register_worker() {
    COUNTERS.exclusive().worker_proc = unsafe { pg_sys::MyProc } as usize;
}

/// The counters a block is wanted for now (`now_ms`, this server's clock), by name, and how
/// many blocks to ask for at once.
pub fn wanted(now_ms: u64) -> Vec<(String, u32)> {
    let counters = COUNTERS.share();
    counters
        .slots
        .iter()
        .filter(|s| s.used && s.wanted && s.retry_at_ms <= now_ms)
        .map(|s| (s.name().to_string(), u32::from(s.ask)))
        .collect()
}

/// When the worker should look again at the latest (this server's clock): the earliest retry
/// of a counter that still wants a block.
pub fn next_retry_ms() -> Option<u64> {
    let counters = COUNTERS.share();
    counters
        .slots
        .iter()
        .filter(|s| s.used && s.wanted)
        .map(|s| s.retry_at_ms)
        .min()
}

/// What the registry answered for counter `name`.
pub enum Answer {
    Granted {
        block: Block,
        width: u32,
        block_size: u64,
    },
    /// Not now: the counter's pace allows the next block at `retry_at_ms` (this server's clock).
    RateLimited { retry_at_ms: u64 },
    /// No block will come until something changes: why, in words.
    Refused(String),
    /// The registry could not be asked: why, in words; asked again at `retry_at_ms`.
    Failed { text: String, retry_at_ms: u64 },
}

/// Records the answer in the counter's slot: a block granted goes into the hand or becomes the
/// spare. Returns a block that was refused, with why, for the log.
pub fn record(name: &str, answer: Answer, took_us: u64) -> Option<String> {
    let mut counters = COUNTERS.exclusive();
    let slot = counters
        .slots
        .iter_mut()
        .find(|s| s.used && s.name() == name)?;
    slot.last_take_us = took_us;
    slot.take_us += took_us;
    match answer {
        Answer::Granted {
            block,
            width,
            block_size,
        } => {
            if slot.blocks.highest_end > 0 && u32::from(slot.width) != width {
                slot.failing = true;
                let text = format!("the registry's counter {name} now makes codes of {width} digits, and this server issued codes of {} digits of it: restart the server to take up the new width", slot.width);
                slot.set_text(&text);
                slot.wanted = false;
                // Not asked again for a minute: each answer would throw blocks away.
                slot.retry_at_ms = clock::now_unix_ms() + 60_000;
                return Some(text);
            }
            match slot.blocks.add(block) {
                Ok(()) => {
                    slot.width = width as u8;
                    slot.block_size = block_size;
                    slot.failing = false;
                    slot.text_len = 0;
                    slot.wanted = slot.blocks.wants_block();
                    slot.retry_at_ms = 0;
                    // As Leaf-segment sizes its segments: what the last grant lasted says how
                    // much to ask for next (a second's worth at least, ten at most).
                    let now_ms = clock::now_unix_ms();
                    let lasted_ms = now_ms.saturating_sub(slot.last_grant_ms);
                    slot.ask = if slot.starved || lasted_ms < 1000 {
                        slot.ask.saturating_mul(2).min(64)
                    } else if lasted_ms > 10_000 {
                        (slot.ask / 2).max(1)
                    } else {
                        slot.ask
                    };
                    slot.last_grant_ms = now_ms;
                    slot.starved = false;
                    None
                }
                Err(Refused::NotAbove { highest_end }) => {
                    slot.failing = true;
                    let text = format!("the registry granted numbers {} to {} of counter {name}, and this server had numbers up to {} of it already: the registry handed out a block twice (it lost history it should have kept), so no code is issued from it", block.start, block.end - 1, highest_end - 1);
                    slot.set_text(&text);
                    slot.retry_at_ms = clock::now_unix_ms() + 1000;
                    Some(text)
                }
                Err(Refused::Empty) => None,
            }
        }
        Answer::RateLimited { retry_at_ms } => {
            slot.retry_at_ms = retry_at_ms;
            None
        }
        Answer::Refused(text) => {
            // Asked again only when a backend asks again (a counter the registry lacks costs
            // the registry nothing while nobody calls for it).
            slot.failing = true;
            slot.wanted = false;
            slot.set_text(&text);
            slot.retry_at_ms = clock::now_unix_ms() + 1000;
            None
        }
        Answer::Failed { text, retry_at_ms } => {
            slot.failing = true;
            slot.set_text(&text);
            slot.retry_at_ms = retry_at_ms;
            None
        }
    }
}

/// One counter as the status view shows it.
pub struct Status {
    pub name: String,
    pub width: u32,
    pub in_hand: u64,
    pub issued: u64,
    pub blocks_taken: u64,
    pub last_take_us: u64,
    pub mean_take_us: u64,
    pub failing: bool,
    pub text: String,
}

pub fn status() -> Vec<Status> {
    let counters = COUNTERS.share();
    counters
        .slots
        .iter()
        .filter(|s| s.used)
        .map(|s| Status {
            name: s.name().to_string(),
            width: u32::from(s.width),
            in_hand: s.blocks.left(),
            issued: s.blocks.issued,
            blocks_taken: s.blocks.blocks_taken,
            last_take_us: s.last_take_us,
            mean_take_us: s.take_us / s.blocks.blocks_taken.max(1),
            failing: s.failing,
            text: s.text(),
        })
        .collect()
}
