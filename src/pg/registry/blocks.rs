//! The block worker (`idgen block worker`): a background worker that takes blocks of the
//! registry's counters for short_code_next(), ahead of need. It sleeps until a backend wants a
//! block (its latch) or a counter's pace allows the next one, asks the registry once for each
//! counter that wants one, and records the answer in shared memory (`short_codes::record`).
//! Codes never wait for it while the block in hand lasts.

use super::worker::{exit_for_restart, stopping, wait};
use crate::pg::registry_client::Registry;
use crate::pg::short_codes::{self, Answer};
use crate::pg::{clock, settings};
use idgen_core::short_code::Block;
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;
use std::time::{Duration, Instant};

/// How long after a failed call the worker asks again, and how long it sleeps with nothing to do.
const RETRY_MS: u64 = 1000;
const IDLE_MS: u64 = 1000;

/// The block worker's entry point (its C symbol is named in the worker's registration).
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn idgen_block_worker(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(conninfo) = settings::registry() else {
        return;
    };
    short_codes::register_worker();
    // A neutral application_name: any role on the registry can read pg_stat_activity.
    let mut registry = Registry::new(&conninfo, "idgen block worker");
    let stop = stopping;
    loop {
        if stop() {
            exit_for_restart();
        }
        let now_ms = clock::now_unix_ms();
        for (name, blocks) in short_codes::wanted(now_ms) {
            let started = Instant::now();
            let answer = match registry.take_block(&name, blocks, &stop) {
                Ok(reply) => answer_of(&name, reply),
                Err(failure) => {
                    if stop() {
                        exit_for_restart();
                    }
                    Answer::Failed {
                        text: format!("the registry is unreachable: {}", failure.message),
                        retry_at_ms: clock::now_unix_ms() + RETRY_MS,
                    }
                }
            };
            if let Answer::Failed { text, .. } | Answer::Refused(text) = &answer {
                warning!("idgen: no block of counter {name}: {text}");
            }
            let took_us = started.elapsed().as_micros() as u64;
            if let Some(text) = short_codes::record(&name, answer, took_us) {
                warning!("idgen: {text}");
            }
        }
        let now_ms = clock::now_unix_ms();
        let sleep_ms = short_codes::next_retry_ms()
            .map_or(IDLE_MS, |at| at.saturating_sub(now_ms).clamp(1, IDLE_MS));
        if !wait(Duration::from_millis(sleep_ms)) {
            exit_for_restart();
        }
    }
}

fn answer_of(name: &str, reply: crate::pg::registry_client::BlockReply) -> Answer {
    match reply.outcome.as_str() {
        "granted" if reply.end > reply.first && reply.width > 0 => Answer::Granted {
            block: Block {
                start: reply.first,
                end: reply.end,
            },
            width: reply.width,
            block_size: reply.block_size,
        },
        // The registry's clock says when; this server waits as long on its own.
        "rate_limited" => Answer::RateLimited {
            retry_at_ms: clock::now_unix_ms()
                + reply
                    .retry_at_ms
                    .saturating_sub(reply.registry_now_ms)
                    .clamp(1, 60_000),
        },
        "no_counter" => Answer::Refused(format!(
            "the registry has no counter {name}: its owner creates it with idgen_registry.create_counter('{name}', <width>), and, where it existed before (lost with a restore of the registry from before it was created), with p_start above every code of it in use"
        )),
        "exhausted" => Answer::Refused(format!(
            "every code of counter {name}'s {} digits was handed out: create a wider counter",
            reply.width
        )),
        other => Answer::Refused(format!(
            "the registry's take_block() answered {other:?}, which this idgen does not know"
        )),
    }
}
