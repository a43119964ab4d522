//! The relay's used-nonce table: every redeemed token's nonce, per principal, until the
//! token expires, so a token opens once.
//!
//! Bounded twice: one principal holds at most `share` nonces (a sixteenth of the table; the
//! anonymous caller is one principal like any other), and the table at most `capacity`. A
//! full table never refuses a principal holding less than the largest holder: room is made by
//! forgetting the largest holder's soonest-expiring nonce and raising that principal's
//! *floor* to its expiry. A token of that principal expiring at or before its floor is then
//! refused as used, so forgetting never allows a replay; the cost (refused older tokens)
//! falls on the caller holding the most. Only a caller already among the largest holders of
//! a full table is refused for overload, with the documented 429 and a retry time.

use std::collections::HashMap;

use crate::mrtr::Refused;

/// Most used nonces remembered at once (until their tokens expire).
pub(super) const MAX_USED: usize = 16 * 1024;
/// Most used nonces one principal may hold (a sixteenth of the table). Per principal is
/// sound: a token opens only for the principal it was sealed for.
pub(super) const PER_PRINCIPAL: usize = MAX_USED / 16;

/// One principal's used nonces.
#[derive(Debug, Default)]
struct Held {
    /// Nonce → its token's expiry (unix seconds).
    nonces: HashMap<String, u64>,
    /// Tokens expiring at or before this were forgotten to make room: refused as used. Never
    /// above the expiry of a nonce still held, so it has passed once they all have.
    floor: u64,
}

/// Why a nonce was not remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Used already, or expired (the relay's ordinary refusal).
    Refused(Refused),
    /// The caller holds its share (`limit`) of the table; retry in `retry_after` seconds.
    Over { limit: usize, retry_after: u64 },
}

/// Used nonces per principal (`Principal::key`).
#[derive(Debug)]
pub(super) struct Used {
    by_principal: HashMap<String, Held>,
    total: usize,
    capacity: usize,
    share: usize,
}

impl Default for Used {
    fn default() -> Self {
        Used::new(MAX_USED, PER_PRINCIPAL)
    }
}

impl Used {
    pub(super) fn new(capacity: usize, share: usize) -> Self {
        Used {
            by_principal: HashMap::new(),
            total: 0,
            capacity: capacity.max(1),
            share: share.clamp(1, capacity.max(1)),
        }
    }

    /// Nonces remembered, all principals together.
    #[cfg(test)]
    pub(super) fn total(&self) -> usize {
        self.total
    }

    /// Remembers `nonce` for `principal` until `expires` (unix seconds; `now` is the time
    /// the token was checked at), or says why not.
    pub(super) fn remember(
        &mut self,
        principal: &str,
        nonce: &str,
        expires: u64,
        now: u64,
    ) -> Result<(), Refusal> {
        if expires <= now {
            return Err(Refusal::Refused(Refused::Expired));
        }
        if let Some(held) = self.by_principal.get(principal) {
            if expires <= held.floor || held.nonces.contains_key(nonce) {
                return Err(Refusal::Refused(Refused::Unknown));
            }
        }
        if self.held_by(principal) >= self.share || self.total >= self.capacity {
            self.prune(now);
        }
        let mine = self.held_by(principal);
        if mine >= self.share {
            let retry_after = self.soonest(Some(principal), now);
            return Err(Refusal::Over {
                limit: self.share,
                retry_after,
            });
        }
        if self.total >= self.capacity {
            self.make_room(principal, mine, now)?;
        }
        let held = self.by_principal.entry(principal.to_owned()).or_default();
        held.nonces.insert(nonce.to_owned(), expires);
        self.total += 1;
        Ok(())
    }

    fn held_by(&self, principal: &str) -> usize {
        self.by_principal
            .get(principal)
            .map_or(0, |h| h.nonces.len())
    }

    /// Forgets every nonce whose token has expired (and every principal left with none:
    /// its floor has passed too).
    fn prune(&mut self, now: u64) {
        self.by_principal.retain(|_, held| {
            held.nonces.retain(|_, expires| *expires > now);
            !held.nonces.is_empty()
        });
        self.total = self.by_principal.values().map(|h| h.nonces.len()).sum();
    }

    /// Frees one place in a full table for `principal` (holding `mine`) by forgetting the
    /// soonest-expiring nonce of the largest holder, when that holder holds more than
    /// `principal` would after this one; otherwise `principal` is among the largest holders
    /// and is refused, with the fair share of the moment as its limit.
    fn make_room(&mut self, principal: &str, mine: usize, now: u64) -> Result<(), Refusal> {
        let largest = self
            .by_principal
            .iter_mut()
            .max_by_key(|(_, held)| held.nonces.len())
            .filter(|(_, held)| held.nonces.len() > mine + 1);
        let Some((_, held)) = largest else {
            let holders = self.by_principal.len() + usize::from(mine == 0);
            return Err(Refusal::Over {
                limit: self.capacity.div_ceil(holders.max(1)),
                retry_after: self.soonest((mine > 0).then_some(principal), now),
            });
        };
        let oldest = held
            .nonces
            .iter()
            .min_by_key(|(_, expires)| **expires)
            .map(|(nonce, expires)| (nonce.clone(), *expires));
        if let Some((nonce, expires)) = oldest {
            held.nonces.remove(&nonce);
            held.floor = held.floor.max(expires);
            self.total -= 1;
        }
        Ok(())
    }

    /// Seconds until the soonest expiry among `principal`'s nonces (every principal's when
    /// `None`), at least one.
    fn soonest(&self, principal: Option<&str>, now: u64) -> u64 {
        let soonest = match principal {
            Some(p) => self
                .by_principal
                .get(p)
                .and_then(|h| h.nonces.values().min().copied()),
            None => self
                .by_principal
                .values()
                .filter_map(|h| h.nonces.values().min().copied())
                .min(),
        };
        soonest.unwrap_or(now).saturating_sub(now).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000;

    fn fill(used: &mut Used, principal: &str, n: usize) {
        for i in 0..n {
            let nonce = format!("{principal}-{i}");
            // Expiries spread over a minute, oldest first.
            let expires = NOW + 1 + (i as u64 % 60);
            assert_eq!(used.remember(principal, &nonce, expires, NOW), Ok(()));
        }
    }

    /// Sixteen principals at their full share fill the table; a seventeenth still redeems,
    /// and what was forgotten for it cannot be replayed.
    #[test]
    fn a_full_table_leaves_room_for_a_principal_below_its_share() {
        let mut used = Used::default();
        for p in 0..16 {
            fill(&mut used, &format!("p{p}"), PER_PRINCIPAL);
        }
        assert_eq!(used.total(), MAX_USED);
        assert_eq!(used.remember("late", "n", NOW + 30, NOW), Ok(()));
        assert_eq!(used.total(), MAX_USED, "still bounded");
        assert_eq!(
            used.remember("late", "n", NOW + 30, NOW),
            Err(Refusal::Refused(Refused::Unknown)),
            "single use still"
        );
        // Every nonce of the sixteen is either still remembered or refused by its floor.
        let mut replayable = 0;
        for p in 0..16 {
            let p = format!("p{p}");
            for i in 0..PER_PRINCIPAL {
                let expires = NOW + 1 + (i as u64 % 60);
                if used.remember(&p, &format!("{p}-{i}"), expires, NOW).is_ok() {
                    replayable += 1;
                }
            }
        }
        assert_eq!(replayable, 0);
        // Many more newcomers, each still served.
        for p in 0..200 {
            let p = format!("new{p}");
            assert_eq!(used.remember(&p, "x", NOW + 59, NOW), Ok(()), "{p}");
        }
        assert_eq!(used.total(), MAX_USED);
    }

    /// A caller among the largest holders of a full table is refused for overload (the 429
    /// variant, with a retry time), never served by evicting an equal.
    #[test]
    fn overload_is_refused_with_a_retry_time() {
        let mut used = Used::new(8, 4);
        fill(&mut used, "a", 4);
        fill(&mut used, "b", 4);
        match used.remember("a", "more", NOW + 50, NOW) {
            Err(Refusal::Over { limit, retry_after }) => {
                assert_eq!(limit, 4);
                assert!((1..=60).contains(&retry_after), "{retry_after}");
            }
            other => panic!("{other:?}"),
        }
        // A newcomer takes room from one of them; then the two are at 3 and 4, and the one
        // at 3 cannot take from the one at 4 (it would hold as many).
        assert_eq!(used.remember("c", "n", NOW + 50, NOW), Ok(()));
        let lower = if used.held_by("a") == 3 { "a" } else { "b" };
        assert!(matches!(
            used.remember(lower, "again", NOW + 50, NOW),
            Err(Refusal::Over { .. })
        ));
        // Once everything has expired, the table is free again.
        assert_eq!(used.remember("a", "later", NOW + 200, NOW + 100), Ok(()));
        assert_eq!(used.total(), 1);
    }

    /// The anonymous caller is one principal: it fills its share and no more.
    #[test]
    fn one_principal_never_takes_more_than_its_share() {
        let mut used = Used::default();
        fill(&mut used, "anonymous\0", PER_PRINCIPAL);
        assert!(matches!(
            used.remember("anonymous\0", "x", NOW + 30, NOW),
            Err(Refusal::Over {
                limit: PER_PRINCIPAL,
                ..
            })
        ));
        assert_eq!(used.total(), PER_PRINCIPAL);
    }
}
