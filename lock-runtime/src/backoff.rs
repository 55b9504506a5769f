//! The one retry policy: pauses that double from a first to a longest one, each shortened by a
//! random part so that clients retrying after the same outage do not come back in lockstep.

use std::time::Duration;

/// The pauses between attempts of one thing being retried.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    longest: Duration,
    next: Duration,
}

impl Backoff {
    /// For requests made on behalf of a caller waiting for them (an acquire retried within its
    /// wait budget, a dropped guard's release within its lease): 20 ms, doubling to 500 ms.
    pub(crate) const fn requests() -> Self {
        Self::new(Duration::from_millis(20), Duration::from_millis(500))
    }

    /// For connections of the manager's own that nobody waits on directly (subscriptions,
    /// failover listeners): 50 ms, doubling to 2 s.
    pub(crate) const fn connections() -> Self {
        Self::new(Duration::from_millis(50), Duration::from_secs(2))
    }

    const fn new(first: Duration, longest: Duration) -> Self {
        Backoff {
            first,
            longest,
            next: first,
        }
    }

    /// The longest the next pause can be: to decide whether there is time for it.
    pub(crate) fn peek(&self) -> Duration {
        self.next
    }

    /// The next pause: between half and all of the current step, which then doubles.
    pub(crate) fn pause(&mut self) -> Duration {
        let step = self.next;
        self.next = (step * 2).min(self.longest);
        step / 2 + jitter(step / 2)
    }

    /// The thing worked: the next failure starts from the first pause again.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

/// A random duration below `max` (zero for a zero `max`).
pub(crate) fn jitter(max: Duration) -> Duration {
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    let max_micros = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    if max_micros == 0 {
        return Duration::ZERO;
    }
    Duration::from_micros(random % max_micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_longest_with_jitter_below_each_step() {
        let mut backoff = Backoff::requests();
        let mut step = Duration::from_millis(20);
        for _ in 0..10 {
            assert_eq!(backoff.peek(), step);
            let pause = backoff.pause();
            assert!(
                pause >= step / 2 && pause <= step,
                "{pause:?} for a step of {step:?}"
            );
            step = (step * 2).min(Duration::from_millis(500));
        }
        backoff.reset();
        assert_eq!(backoff.peek(), Duration::from_millis(20));
    }

    #[test]
    fn jitter_stays_below_its_bound() {
        for _ in 0..100 {
            assert!(jitter(Duration::from_millis(10)) < Duration::from_millis(10));
        }
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }
}
