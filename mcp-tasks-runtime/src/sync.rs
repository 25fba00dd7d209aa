//! The one policy for poisoned locks.
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
