//! A bounded number of things at once (metrics streams, loads): each holds a [`Slot`] for as
//! long as it runs, and the next one beyond the bound is refused with ResourceExhausted.

use std::sync::atomic::{AtomicUsize, Ordering};

use tonic::Status;

/// At most `max` holders of `what` at once.
#[derive(Debug)]
pub(crate) struct Slots {
    taken: AtomicUsize,
    max: usize,
    what: &'static str,
}

/// One place among [`Slots`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot(&'static Slots);

impl Slots {
    pub(crate) const fn new(max: usize, what: &'static str) -> Self {
        Slots {
            taken: AtomicUsize::new(0),
            max,
            what,
        }
    }

    /// A slot, or ResourceExhausted naming the bound when all are taken.
    pub(crate) fn take(&'static self) -> Result<Slot, Status> {
        if self.taken.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.taken.fetch_sub(1, Ordering::AcqRel);
            return Err(Status::resource_exhausted(format!(
                "this agent already serves {} {}",
                self.max, self.what
            )));
        }
        Ok(Slot(self))
    }

    /// Slots held now.
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::AcqRel);
    }
}
