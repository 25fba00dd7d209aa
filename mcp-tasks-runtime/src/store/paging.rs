//! What the stores share about pages and batches: their cursors, their SQL limits, and the
//! deletion of expired tasks a batch at a time.

use super::StoreError;
use std::fmt::Display;
use std::str::FromStr;

/// A page cursor: the store's tag letter, then the sequence number of the page's last task.
pub(crate) fn cursor(tag: char, last: impl Display) -> String {
    format!("{tag}{last}")
}

/// Reads a cursor this store made (tag letter, then decimal digits only); `None` for
/// anything else, including a number out of range.
pub(crate) fn parse_cursor<T: FromStr>(cursor: &str, tag: char) -> Option<T> {
    let digits = cursor.strip_prefix(tag)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Where a listing starts: after the cursor's task, or at the start (`0`) without one; a
/// cursor this store did not make is [`StoreError::InvalidCursor`].
pub(crate) fn cursor_after<T: FromStr + Default>(
    cursor: Option<&str>,
    tag: char,
) -> Result<T, StoreError> {
    match cursor {
        None => Ok(T::default()),
        Some(c) => parse_cursor(c, tag).ok_or_else(|| StoreError::InvalidCursor(c.to_owned())),
    }
}

/// A limit as SQL takes it.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn clamp_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// How many expired tasks one statement or script deletes at most: larger limits take several
/// batches, so a big sweep never holds a store's writer (SQLite) or Redis for long.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
const EXPIRE_BATCH: usize = 1000;

/// Deletes up to `limit` expired tasks, [`EXPIRE_BATCH`] at a time (`delete(n)` deletes up
/// to `n` and returns their ids), until a batch comes back short.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
pub(crate) async fn expire_in_batches<F, Fut>(
    limit: usize,
    mut delete: F,
) -> Result<Vec<String>, StoreError>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<String>, StoreError>>,
{
    let mut expired = Vec::new();
    while expired.len() < limit {
        let batch = (limit - expired.len()).min(EXPIRE_BATCH);
        let ids = delete(batch).await?;
        let done = ids.len() < batch;
        expired.extend(ids);
        if done {
            break;
        }
    }
    Ok(expired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_strict() {
        assert_eq!(parse_cursor::<u64>("m0", 'm'), Some(0));
        assert_eq!(parse_cursor::<u64>("m42", 'm'), Some(42));
        for bad in [
            "",
            "m",
            "42",
            "m+1",
            "m-1",
            "m1x",
            "n1",
            "m99999999999999999999",
        ] {
            assert_eq!(parse_cursor::<u64>(bad, 'm'), None, "{bad:?}");
        }
        assert_eq!(cursor('m', 42), "m42");
        assert_eq!(cursor_after::<i64>(None, 's').unwrap(), 0);
        assert!(matches!(
            cursor_after::<i64>(Some("s9223372036854775808"), 's'),
            Err(StoreError::InvalidCursor(_))
        ));
    }
}
