//! Short codes for a fleet: the numbers behind them, in the two ways a fleet can make them.
//!
//! - **Blocks from the registry** (`short_code_next()`): a counter in the registry hands each
//!   server blocks of consecutive numbers; the server issues from the block in hand and takes the
//!   next one (the spare) in the background before it runs out, as Leaf-segment's double buffer
//!   does. [`Blocks`] is one counter's blocks in one server: which number comes next, when to ask
//!   for the spare, and which blocks to refuse (one that does not lie above every block this
//!   server had: the registry lost history it should not have).
//! - **Numbers that carry the worker id** (`worker_code_next()`), for fleets with no registry:
//!   a counter of the server's own, `counter * workers + worker_id` ([`worker_number`]), unique
//!   across the fleet as long as worker ids are, and as short as the fleet's size allows
//!   ([`codes_per_worker`]).

/// The numbers a code of `width` base62 digits holds, 62^width, capped at 2^63 (a bigint): a
/// width of 11 or more holds every bigint.
pub fn capacity(width: u32) -> u64 {
    let mut n: u128 = 1;
    for _ in 0..width.min(11) {
        n *= 62;
    }
    n.min(1u128 << 63) as u64
}

/// The counter values each of `workers` worker ids gets in codes of `width` digits: the
/// numbers `counter * workers + worker_id` below [`capacity`] for the highest worker id (every
/// worker id gets the same count, so that no server runs out before another).
pub fn codes_per_worker(width: u32, workers: u64) -> u64 {
    if workers == 0 {
        return 0;
    }
    capacity(width) / workers
}

/// The number of counter value `counter` of worker id `worker_id` among `workers` ids, if a
/// code of `width` digits holds it for every worker id.
pub fn worker_number(counter: u64, worker_id: u64, workers: u64, width: u32) -> Option<u64> {
    if worker_id >= workers || counter >= codes_per_worker(width, workers) {
        return None;
    }
    Some(counter * workers + worker_id)
}

/// A block of numbers, `start` to `end - 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Block {
    pub start: u64,
    pub end: u64,
}

impl Block {
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a block from the registry is not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// It does not lie above every block this server had of the counter: the registry handed
    /// out numbers it had handed out before.
    NotAbove {
        highest_end: u64,
    },
    Empty,
}

/// One counter's blocks in one server: the block codes come from, the spare taken ahead, and
/// what has been issued. Plain data: it lives in shared memory, under a lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Blocks {
    /// The block in hand: `current.start` is the next number.
    pub current: Block,
    pub spare: Block,
    /// The end of the highest block this server took of the counter (0: none yet).
    pub highest_end: u64,
    pub issued: u64,
    pub blocks_taken: u64,
    /// How many numbers the last block taken held (several blocks granted at once are one).
    pub last_len: u64,
}

impl Blocks {
    /// The next number, from the block in hand, else from the spare, which becomes the block
    /// in hand; None when both are used up.
    pub fn take(&mut self) -> Option<u64> {
        if self.current.is_empty() {
            self.current = std::mem::take(&mut self.spare);
        }
        if self.current.is_empty() {
            return None;
        }
        let n = self.current.start;
        self.current.start += 1;
        self.issued += 1;
        Some(n)
    }

    /// Up to `most` consecutive numbers at once (at least one, while any is left), from the
    /// block in hand, else from the spare, as `take` gives them one by one.
    pub fn take_up_to(&mut self, most: u64) -> Option<Block> {
        if self.current.is_empty() {
            self.current = std::mem::take(&mut self.spare);
        }
        if self.current.is_empty() {
            return None;
        }
        let n = most.max(1).min(self.current.len());
        let got = Block {
            start: self.current.start,
            end: self.current.start + n,
        };
        self.current.start += n;
        self.issued += n;
        Some(got)
    }

    /// Whether to ask for the next block now: no spare, and less than half of the last block
    /// taken left in hand (none taken yet: at once).
    pub fn wants_block(&self) -> bool {
        self.spare.is_empty() && self.current.len() * 2 <= self.last_len
    }

    /// Numbers in hand: the rest of the current block and the spare.
    pub fn left(&self) -> u64 {
        self.current.len() + self.spare.len()
    }

    /// Takes a block from the registry: into the hand if it is empty, else as the spare. A
    /// block that does not lie above every block taken before is refused.
    pub fn add(&mut self, block: Block) -> Result<(), Refused> {
        if block.is_empty() {
            return Err(Refused::Empty);
        }
        if block.start < self.highest_end {
            return Err(Refused::NotAbove {
                highest_end: self.highest_end,
            });
        }
        self.highest_end = block.end;
        self.blocks_taken += 1;
        self.last_len = block.len();
        if self.current.is_empty() {
            self.current = block;
        } else {
            self.spare = block;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn capacity_is_62_to_the_width_up_to_every_bigint() {
        assert_eq!(capacity(1), 62);
        assert_eq!(capacity(6), 56_800_235_584);
        assert_eq!(capacity(10), 839_299_365_868_340_224);
        assert_eq!(capacity(11), 1 << 63);
        assert_eq!(capacity(40), 1 << 63);
    }

    #[test]
    fn codes_per_worker_for_1024_workers() {
        // the figures docs/base62.md gives
        assert_eq!(codes_per_worker(6, 1024), 55_468_980);
        assert_eq!(codes_per_worker(7, 1024), 3_439_076_763);
        assert_eq!(codes_per_worker(8, 1024), 213_222_759_360);
    }

    #[test]
    fn a_worker_number_is_refused_past_its_share() {
        let per = codes_per_worker(6, 1024);
        assert_eq!(worker_number(per - 1, 1023, 1024, 6), Some(per * 1024 - 1));
        assert!(per * 1024 <= capacity(6));
        assert_eq!(worker_number(per, 0, 1024, 6), None);
        assert_eq!(worker_number(0, 1024, 1024, 6), None);
    }

    #[test]
    fn the_spare_becomes_the_block_in_hand() {
        let mut b = Blocks::default();
        assert_eq!(b.take(), None);
        assert!(b.wants_block(), "none in hand");
        b.add(Block { start: 10, end: 14 }).unwrap();
        assert!(!b.wants_block(), "a fresh block wants no spare yet");
        assert_eq!((b.take(), b.take()), (Some(10), Some(11)));
        assert!(b.wants_block(), "half of it used");
        b.add(Block { start: 50, end: 51 }).unwrap();
        assert!(!b.wants_block());
        assert_eq!(
            (b.take(), b.take(), b.take(), b.take()),
            (Some(12), Some(13), Some(50), None)
        );
        assert_eq!(b.issued, 5);
    }

    #[test]
    fn a_block_at_or_below_one_taken_before_is_refused() {
        let mut b = Blocks::default();
        b.add(Block {
            start: 1000,
            end: 2000,
        })
        .unwrap();
        assert_eq!(
            b.add(Block {
                start: 1500,
                end: 2500
            }),
            Err(Refused::NotAbove { highest_end: 2000 })
        );
        assert!(b
            .add(Block {
                start: 0,
                end: 1000
            })
            .is_err());
        assert_eq!(b.add(Block { start: 5, end: 5 }), Err(Refused::Empty));
        assert_eq!(b.blocks_taken, 1);
    }

    proptest! {
        /// Whatever blocks the registry hands out, in whatever order, and however takes and
        /// adds interleave, a server issues no number twice and only numbers of blocks it
        /// accepted, in increasing order.
        #[test]
        fn no_number_twice_and_each_above_the_last(
            steps in proptest::collection::vec((any::<bool>(), 0u64..5_000, 1u64..50), 1..300)
        ) {
            let mut b = Blocks::default();
            let mut issued: Vec<u64> = Vec::new();
            let mut accepted: Vec<Block> = Vec::new();
            for (is_take, start, len) in steps {
                if is_take {
                    if len % 2 == 0 {
                        if let Some(n) = b.take() {
                            issued.push(n);
                        }
                    } else if let Some(k) = b.take_up_to(len / 4) {
                        issued.extend(k.start..k.end);
                    }
                } else if b.spare.is_empty() {
                    let block = Block { start, end: start + len };
                    if b.add(block).is_ok() {
                        accepted.push(block);
                    }
                }
            }
            prop_assert!(issued.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(issued.iter().all(|n| accepted.iter().any(|k| k.start <= *n && *n < k.end)));
        }

        /// Two worker ids never share a number, and each number decodes to its worker id.
        #[test]
        fn worker_numbers_are_apart(a in 0u64..1_000_000, b in 0u64..1_000_000, wa in 0u64..1024, wb in 0u64..1024) {
            let na = worker_number(a, wa, 1024, 7).unwrap();
            let nb = worker_number(b, wb, 1024, 7).unwrap();
            prop_assert_eq!(na == nb, a == b && wa == wb);
            prop_assert_eq!(na % 1024, wa);
        }
    }
}
