//! The query of a task listing: `status`, `tool`, `owner`, time ranges, `q`, `cursor`,
//! `limit`.

use crate::store::TaskFilter;
use crate::task::TaskStatus;
use std::time::SystemTime;

/// The most tasks one page holds.
pub(super) const MAX_LIMIT: usize = 500;

/// A listing, as its query asks for it.
#[derive(Debug, Default)]
pub(super) struct ListQuery {
    pub(super) filter: TaskFilter,
    pub(super) search: Option<String>,
    pub(super) cursor: Option<String>,
    pub(super) limit: usize,
}

/// The pairs of a query string, decoded.
fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Percent-decoding, with `+` as a space.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(hi), Some(lo)) => {
                        out.push((hi * 16 + lo) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A time of a range: RFC 3339 (`2026-01-02T03:04:05Z`), or a duration ago (`15m`, `2h`).
fn instant(key: &str, value: &str) -> Result<SystemTime, String> {
    if let Ok(at) = humantime::parse_rfc3339_weak(value) {
        return Ok(at);
    }
    if let Ok(ago) = humantime::parse_duration(value) {
        return Ok(SystemTime::now()
            .checked_sub(ago)
            .unwrap_or(SystemTime::UNIX_EPOCH));
    }
    Err(format!(
        "`{key}` takes an RFC 3339 time or a duration ago (like 15m), not {value:?}"
    ))
}

impl ListQuery {
    /// The listing a query string asks for; a bad value is named.
    pub(super) fn parse(query: Option<&str>) -> Result<Self, String> {
        let mut list = ListQuery {
            limit: 50,
            ..Default::default()
        };
        for (key, value) in pairs(query) {
            if value.is_empty() {
                continue;
            }
            match key.as_str() {
                "status" => {
                    for name in value.split(',') {
                        let status: TaskStatus = name.trim().parse().map_err(|_| {
                            format!(
                                "`status` takes working, input_required, completed, failed or cancelled, not {name:?}"
                            )
                        })?;
                        list.filter = std::mem::take(&mut list.filter).status(status);
                    }
                }
                "tool" => list.filter.tool = Some(value),
                "owner" => list.filter.owner = Some(value),
                "createdAfter" => list.filter.created.after = Some(instant(&key, &value)?),
                "createdBefore" => list.filter.created.before = Some(instant(&key, &value)?),
                "updatedAfter" => list.filter.updated.after = Some(instant(&key, &value)?),
                "updatedBefore" => list.filter.updated.before = Some(instant(&key, &value)?),
                "q" => list.search = Some(value.to_lowercase()),
                "cursor" => list.cursor = Some(value),
                "limit" => {
                    list.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            format!("`limit` takes a number from 1 to {MAX_LIMIT}, not {value:?}")
                        })?;
                }
                other => return Err(format!("unknown query parameter {other:?}")),
            }
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_query() {
        let q = ListQuery::parse(Some(
            "status=working,failed&tool=slow_compute&owner=principal%3Aalice&q=Disk+full&limit=7",
        ))
        .unwrap();
        assert_eq!(q.filter.statuses, [TaskStatus::Working, TaskStatus::Failed]);
        assert_eq!(q.filter.tool.as_deref(), Some("slow_compute"));
        assert_eq!(q.filter.owner.as_deref(), Some("principal:alice"));
        assert_eq!(q.search.as_deref(), Some("disk full"));
        assert_eq!(q.limit, 7);
        assert!(ListQuery::parse(Some("status=sleeping")).is_err());
        assert!(ListQuery::parse(Some("limit=0")).is_err());
        assert!(ListQuery::parse(Some("colour=red")).is_err());
        assert!(ListQuery::parse(Some("createdAfter=yesterday")).is_err());
        let q =
            ListQuery::parse(Some("createdAfter=15m&updatedBefore=2026-01-02T03:04:05Z")).unwrap();
        assert!(q.filter.created.after.is_some() && q.filter.updated.before.is_some());
        assert_eq!(decode("a%2"), "a%2");
    }
}
