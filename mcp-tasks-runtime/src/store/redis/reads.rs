//! The reads that take more than one command: the change feed, and the unfinished scan's
//! index members and records.

use super::connection::Shared;
use super::row::decode;
use crate::store::StoreError;
use crate::store::remote::read_feed;
use crate::task::TaskRecord;

/// One page of the change feed, as [`Shared::feed_page`] reads it.
pub(super) struct FeedPage {
    /// The change counter.
    pub(super) end: u64,
    /// The highest change number trimmed from the feed.
    pub(super) floor: u64,
    /// The ids of the page, oldest change first.
    pub(super) ids: Vec<String>,
    /// The cursor after the page.
    pub(super) next: u64,
}

/// How many records, index members and feed entries
/// [`TaskStore::unfinished`](crate::store::TaskStore::unfinished) reads per round trip.
pub(super) const UNFINISHED_BATCH: usize = 500;

impl Shared {
    /// One page of the change feed: up to `limit` entries written after `after` (none
    /// without a cursor), with the feed's counter and trimmed floor.
    pub(super) async fn feed_page(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<FeedPage, StoreError> {
        let mut call = self.scripts.changes.prepare_invoke();
        call.arg(&self.prefix)
            .arg(after.unwrap_or(u64::MAX))
            .arg(if after.is_some() { limit } else { 0 });
        let got: Vec<String> = self.read("cannot read the change feed", call).await?;
        let number = |text: &String| text.parse::<u64>().unwrap_or(0);
        let mut page = FeedPage {
            end: got.first().map_or(0, number),
            floor: got.get(1).map_or(0, number),
            ids: Vec::new(),
            next: after.unwrap_or(0),
        };
        let mut rest = got.into_iter().skip(2);
        while let (Some(id), Some(n)) = (rest.next(), rest.next()) {
            page.next = page.next.max(n.parse().unwrap_or(page.next));
            page.ids.push(id);
        }
        Ok(page)
    }

    /// The ids written after change `after`, to the end of the feed; `None` where the feed
    /// was trimmed past `after`, or where writes outpace the reading (more entries read than
    /// the feed holds). An id rewritten while the pages are read moves to the end of the
    /// feed, so it is still read, there.
    pub(super) async fn written_since(
        &self,
        after: u64,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let read = |cursor| async move {
            let page = self.feed_page(Some(cursor), UNFINISHED_BATCH).await?;
            Ok::<_, StoreError>((page.floor <= after).then_some((page.ids, page.next)))
        };
        let mut ids = Vec::new();
        let keep = |page: Vec<String>| ids.extend(page);
        let read = read_feed(after, UNFINISHED_BATCH, self.options.feed_len, read, keep).await?;
        Ok(read.map(|_| ids))
    }

    /// Every member of the sorted set `P:set`, a page per `ZSCAN`; a member may come twice.
    pub(super) async fn members(&self, set: &str) -> Result<Vec<String>, StoreError> {
        let key = &format!("{}{set}", self.prefix);
        let mut members = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, page): (u64, Vec<String>) = self
                .read_with("cannot scan unfinished tasks", move |mut conn| async move {
                    ::redis::cmd("ZSCAN")
                        .arg(key)
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(UNFINISHED_BATCH)
                        .query_async(&mut conn)
                        .await
                })
                .await?;
            // Member, score, member, score, …
            members.extend(page.into_iter().step_by(2));
            if next == 0 {
                return Ok(members);
            }
            cursor = next;
        }
    }

    /// The records of `ids` that are still unfinished, read in pipelined batches.
    pub(super) async fn unfinished_of(
        &self,
        ids: &[String],
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let mut unfinished = Vec::with_capacity(ids.len());
        for batch in ids.chunks(UNFINISHED_BATCH) {
            let mut pipe = ::redis::pipe();
            for id in batch {
                pipe.hgetall(self.task_key(id));
            }
            let pipe = &pipe;
            let read: Vec<Vec<String>> = self
                .read_with("cannot read unfinished tasks", move |mut conn| async move {
                    pipe.query_async(&mut conn).await
                })
                .await?;
            unfinished.extend(
                read.into_iter()
                    .filter(|flat| !flat.is_empty())
                    .map(|flat| decode(flat).0)
                    .filter(|record| !record.status.is_terminal()),
            );
        }
        Ok(unfinished)
    }
}
