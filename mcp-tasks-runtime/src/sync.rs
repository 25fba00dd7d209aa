//! Synchronisation helpers: the one policy for poisoned locks, a gate that opens once, and a
//! short list of values used lately.
//!
//! A lock is poisoned when a thread panicked while holding it. Every critical section in this
//! crate leaves its data consistent at each step (an insert, a remove, a swap), so a panic
//! elsewhere in that thread never leaves it half-changed: the lock is taken anyway, and one
//! panicking tool or handler cannot turn every later request into a panic too.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// [`Mutex::lock`] under the crate's policy: a poisoned lock is taken anyway.
pub(crate) trait LockExt<T> {
    /// Locks, recovering the guard of a poisoned lock.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> LockExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A few values used lately, shared between threads, the most recently used first: a new
/// value kept in a full list pushes out the least recently used.
#[derive(Debug)]
pub(crate) struct Recent<T, const N: usize> {
    kept: Mutex<Vec<T>>,
}

impl<T, const N: usize> Default for Recent<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize> Recent<T, N> {
    /// An empty list.
    pub(crate) const fn new() -> Self {
        Self {
            kept: Mutex::new(Vec::new()),
        }
    }
}

impl<T: Clone, const N: usize> Recent<T, N> {
    /// The kept value `matches` picks, made the most recent.
    pub(crate) fn find(&self, matches: impl FnMut(&T) -> bool) -> Option<T> {
        first(&mut self.kept.locked(), matches)
    }

    /// Keeps `value` as the most recent and returns it, unless a kept value is the `same`
    /// as it: that one is made the most recent and returned instead (so two threads that
    /// missed the same value at once keep it once).
    pub(crate) fn keep(&self, value: T, same: impl Fn(&T, &T) -> bool) -> T {
        let mut kept = self.kept.locked();
        if let Some(found) = first(&mut kept, |k| same(k, &value)) {
            return found;
        }
        if kept.len() >= N {
            kept.pop();
        }
        kept.insert(0, value.clone());
        value
    }

    /// The values kept, the most recent first (for the durable stores' codec tests).
    #[cfg(all(test, any(feature = "sqlite", feature = "postgres", feature = "redis")))]
    pub(crate) fn kept(&self) -> Vec<T> {
        self.kept.locked().clone()
    }
}

/// The value `matches` picks, moved to the front.
fn first<T: Clone>(kept: &mut [T], matches: impl FnMut(&T) -> bool) -> Option<T> {
    let at = kept.iter().position(matches)?;
    kept[..=at].rotate_right(1);
    Some(kept[0].clone())
}

/// [`Condvar::wait`] under the same policy: the guard of a poisoned lock is taken back anyway.
#[cfg(feature = "sqlite")]
pub(crate) fn wait<'a, T>(
    ready: &std::sync::Condvar,
    guard: MutexGuard<'a, T>,
) -> MutexGuard<'a, T> {
    ready.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_anyway() {
        let lock = std::sync::Arc::new(Mutex::new(1));
        let poisoner = std::sync::Arc::clone(&lock);
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock().unwrap();
            panic!("poison");
        })
        .join();
        assert!(lock.is_poisoned());
        *lock.locked() += 1;
        assert_eq!(*lock.locked(), 2);
    }
}

/// Opens once something was announced to the client (the response that names a task was
/// written), so that nothing about it goes out before that response.
#[derive(Clone, Debug)]
pub(crate) struct Gate(tokio::sync::watch::Receiver<bool>);

/// Opens its [`Gate`] when dropped: when the reply it rides with was written.
#[derive(Debug)]
pub(crate) struct Opener(tokio::sync::watch::Sender<bool>);

impl Gate {
    /// A closed gate and what opens it.
    pub(crate) fn closed() -> (Self, Opener) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (Self(rx), Opener(tx))
    }

    /// A gate that is open already.
    pub(crate) fn open() -> Self {
        Self(tokio::sync::watch::channel(true).1)
    }

    /// `true` once the gate opened.
    pub(crate) fn is_open(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the gate is open.
    pub(crate) async fn opened(&self) {
        // An opener dropped without opening cannot happen (dropping opens); either way the
        // wait ends.
        let _ = self.0.clone().wait_for(|open| *open).await;
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}
