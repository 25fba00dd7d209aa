//! Idempotency keys: a `tools/call` repeated with the same key starts nothing new.
//!
//! A client that never got the answer to a call (a proxy cut the connection, the server
//! crashed between storing the task and answering, a timeout) cannot tell whether the call
//! ran. Sending the call again with the same key is safe: the server answers a repeat with
//! the task the first call created, or with the first call's result, and starts nothing.
//!
//! The key travels in the request's `_meta` under [`IDEMPOTENCY_KEY_META`] (both eras), or
//! in the `Idempotency-Key` HTTP header (the IETF httpapi draft). It is scoped to the caller
//! and the tool: two callers, or two tools, never share a key. Its length is capped at
//! [`MAX_IDEMPOTENCY_KEY`] characters.

use crate::task::{RandomError, random_id};

/// The `_meta` field of a `tools/call` that carries its idempotency key.
pub const IDEMPOTENCY_KEY_META: &str = "io.github.mcp-tasks/idempotencyKey";

/// The longest idempotency key accepted, in characters.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// A valid idempotency key: 1 to [`MAX_IDEMPOTENCY_KEY`] visible ASCII characters
/// (`!` to `~`, no spaces), the characters an HTTP header carries without quoting trouble.
///
/// ```
/// use mcp_tasks_runtime::idempotency::IdempotencyKey;
/// let key = IdempotencyKey::new("order-1042/charge").unwrap();
/// assert_eq!(key.as_str(), "order-1042/charge");
/// assert!(IdempotencyKey::new("").is_err());
/// assert!(IdempotencyKey::new("two words").is_err());
/// assert_eq!(IdempotencyKey::random().unwrap().as_str().len(), 36);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

/// Why a string is not an idempotency key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyKeyError {
    /// The key is empty.
    #[error("the idempotency key is empty")]
    Empty,
    /// The key is longer than [`MAX_IDEMPOTENCY_KEY`] characters.
    #[error(
        "the idempotency key is {0} characters long; at most {MAX_IDEMPOTENCY_KEY} are allowed"
    )]
    TooLong(usize),
    /// The key holds a character other than visible ASCII.
    #[error(
        "the idempotency key holds {0:?}; only visible ASCII characters (no spaces) are allowed"
    )]
    Character(char),
}

impl IdempotencyKey {
    /// The key `key`, when it is valid.
    pub fn new(key: impl Into<String>) -> Result<Self, IdempotencyKeyError> {
        let key = key.into();
        if key.is_empty() {
            return Err(IdempotencyKeyError::Empty);
        }
        let chars = key.chars().count();
        if chars > MAX_IDEMPOTENCY_KEY {
            return Err(IdempotencyKeyError::TooLong(chars));
        }
        if let Some(c) = key.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(IdempotencyKeyError::Character(c));
        }
        Ok(Self(key))
    }

    /// A fresh random key (a random UUID), for a call about to be sent the first time.
    pub fn random() -> Result<Self, RandomError> {
        random_id().map(Self)
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for IdempotencyKey {
    type Err = IdempotencyKeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii_and_capped() {
        assert_eq!(IdempotencyKey::new(""), Err(IdempotencyKeyError::Empty));
        assert!(IdempotencyKey::new("a".repeat(MAX_IDEMPOTENCY_KEY)).is_ok());
        assert_eq!(
            IdempotencyKey::new("a".repeat(MAX_IDEMPOTENCY_KEY + 1)),
            Err(IdempotencyKeyError::TooLong(MAX_IDEMPOTENCY_KEY + 1))
        );
        assert_eq!(
            IdempotencyKey::new("a\tb"),
            Err(IdempotencyKeyError::Character('\t'))
        );
        assert_eq!(
            IdempotencyKey::new("é"),
            Err(IdempotencyKeyError::Character('é'))
        );
        let random = IdempotencyKey::random().unwrap();
        assert_ne!(random, IdempotencyKey::random().unwrap());
        assert_eq!(random.as_str().parse::<IdempotencyKey>(), Ok(random));
    }
}
