//! Waiting for a condition with a deadline: one attempt at least, then again every
//! `interval` until it is done, it cannot succeed any more, or the time is up.

use std::future::Future;
use std::time::{Duration, Instant};

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt<T, E> {
    /// The condition holds; the wait ends with this value.
    Done(T),
    /// Not yet: try again, and if the time is up, fail with this error.
    Retry(E),
    /// It cannot hold any more (the process exited): fail at once with this error.
    Stop(E),
}

/// Attempts `attempt` until it is done or stops, or `limit` has passed since the first
/// attempt; then the last attempt's error is returned.
pub async fn poll_until<T, E, F, Fut>(
    limit: Duration,
    interval: Duration,
    mut attempt: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt<T, E>>,
{
    let end = Instant::now() + limit;
    loop {
        match attempt().await {
            Attempt::Done(value) => return Ok(value),
            Attempt::Stop(error) => return Err(error),
            Attempt::Retry(error) => {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(error);
                }
                tokio::time::sleep(interval.min(left)).await;
            }
        }
    }
}

/// [`poll_until`] for synchronous callers: the thread sleeps between attempts.
pub fn poll_until_blocking<T, E>(
    limit: Duration,
    interval: Duration,
    mut attempt: impl FnMut() -> Attempt<T, E>,
) -> Result<T, E> {
    let end = Instant::now() + limit;
    loop {
        match attempt() {
            Attempt::Done(value) => return Ok(value),
            Attempt::Stop(error) => return Err(error),
            Attempt::Retry(error) => {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(error);
                }
                std::thread::sleep(interval.min(left));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(5);

    #[test]
    fn done_stop_and_the_deadline_end_a_blocking_wait() {
        let mut tries = 0;
        let value = poll_until_blocking(Duration::from_secs(5), TICK, || {
            tries += 1;
            if tries == 3 {
                Attempt::Done(tries)
            } else {
                Attempt::Retry("not yet")
            }
        });
        assert_eq!(value, Ok(3));
        let stopped: Result<(), _> =
            poll_until_blocking(Duration::from_secs(5), TICK, || Attempt::Stop("exited"));
        assert_eq!(stopped, Err("exited"));
        let started = Instant::now();
        let mut last = 0;
        let timed_out: Result<(), _> = poll_until_blocking(Duration::from_millis(50), TICK, || {
            last += 1;
            Attempt::Retry(last)
        });
        assert_eq!(timed_out, Err(last), "the last attempt's error");
        assert!(started.elapsed() >= Duration::from_millis(50));
    }

    #[tokio::test]
    async fn an_async_wait_tries_at_least_once_even_with_no_time() {
        let mut tries = 0;
        let result: Result<(), u32> = poll_until(Duration::ZERO, TICK, || {
            tries += 1;
            let attempt = Attempt::Retry(tries);
            async move { attempt }
        })
        .await;
        assert_eq!(result, Err(1));
        let done = poll_until(Duration::from_secs(5), TICK, || async {
            Attempt::<_, ()>::Done(7)
        });
        assert_eq!(done.await, Ok(7));
    }
}
