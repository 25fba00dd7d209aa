//! Newline-delimited JSON-RPC over any `AsyncRead` + `AsyncWrite` pair.
//!
//! The same code serves stdio and `tokio::io::duplex` in tests. Each request runs in its own
//! task, so a long tool call never holds up a ping, a cancellation or the client's answer to
//! a server request. Messages still take effect in the order they were read: a request is
//! started (polled once) before the next line is read, so the `initialize` of a client that
//! pipelines its first requests is answered before the requests behind it are looked at.
//! (So a tool that blocks its thread before its first `.await` holds up reading too; tools
//! must not block in any case.)
//!
//! Output is bounded: the session's outbound channel holds the server's
//! [`outbound_capacity`](crate::ServerBuilder::outbound_capacity) lines. A client that stops
//! reading first loses droppable notifications (log lines; of progress and task status all
//! but the latest of each token and task), then holds up the responses and server-to-client
//! requests, which wait for room; once requests are held up the reader stops reading new
//! ones (see [`MAX_IN_FLIGHT`]). Nothing is lost that must not be, and the server's memory
//! stays bounded however long the client does not read.
//!
//! At end of input, requests already read get a grace period to answer, then the session is
//! closed and the transport returns, even while tasks of the session still run: those are
//! left to the task store (and its `on_restart` policy at the next start).

use crate::jsonrpc::Message;
use crate::server::Server;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The longest line accepted (16 MiB); a longer one is answered with a parse error and skipped.
const MAX_LINE: usize = 16 * 1024 * 1024;
/// How long requests still running at end of input may take to answer before they are
/// cancelled; also how long cancelled requests may take to unwind, and the writer to write
/// what is queued.
const EOF_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
/// Requests handled at once on one connection; further requests wait to be read.
const MAX_IN_FLIGHT: usize = 1024;

/// Why a transport stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Reading or writing the byte stream failed.
    #[error("transport i/o failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Serves one client over a byte stream until the reader reaches end of file.
pub async fn serve_io<R, W>(server: Server, reader: R, writer: W) -> Result<(), TransportError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    server.recover_logged().await;
    tracing::info!(
        store = server.store_kind(),
        eras = crate::wire::ERAS,
        "serving MCP over a byte stream (stdio)"
    );
    let (session, mut outbound) = server.session();
    session.set_wire(crate::spans::Wire {
        transport: "pipe",
        protocol: None,
        session: None,
    });
    // The reader writes its parse errors, and each request task its response, through the
    // same bounded channel the writer task drains, waiting for room when it is full. That
    // cannot deadlock: the writer waits only on the channel and on the byte stream (the
    // client reading its output), never on the reader or a request. So a reader waiting for
    // room is ordinary backpressure: it stops reading input while the client does not read
    // output, and goes on once it does. (A client that blocks writing its input while it
    // reads nothing deadlocks itself, as with any pipe.) The waits are also bounded by the
    // session closing: at end of input the session is closed, which ends every wait.
    let sink = session.sink();
    // Tasks of a 2025-11-25 session hold the session's outbound channel for as long as they
    // run, so the writer does not wait for the channel to end: once the session is over it
    // closes the channel, writes what is already queued and stops.
    let finished = CancellationToken::new();
    let mut writer_task = tokio::spawn({
        let finished = finished.clone();
        async move {
            let mut writer = writer;
            loop {
                let line = tokio::select! {
                    line = outbound.recv() => line,
                    () = finished.cancelled(), if !outbound.is_closed() => {
                        outbound.close();
                        continue;
                    }
                };
                let Some(line) = line else { break };
                writer.write_all(line.as_bytes()).await?;
                writer.write_all(b"\n").await?;
                if outbound.is_empty() {
                    writer.flush().await?;
                }
            }
            writer.flush().await?;
            Ok::<_, std::io::Error>(())
        }
    });

    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut requests = JoinSet::new();
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    let read_result = loop {
        buf.clear();
        let n = match (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .await
        {
            Ok(n) => n,
            Err(e) => break Err(e),
        };
        if n == 0 {
            break Ok(());
        }
        if buf.len() > MAX_LINE && !buf.ends_with(b"\n") {
            // Skip the rest of an oversized line.
            let mut rest = Vec::new();
            if let Err(e) = reader.read_until(b'\n', &mut rest).await {
                break Err(e);
            }
            sink.send_text(parse_error("message too large")).await;
            continue;
        }
        let text = match std::str::from_utf8(&buf) {
            Ok(t) => t.trim(),
            Err(_) => {
                sink.send_text(parse_error("message is not valid UTF-8"))
                    .await;
                continue;
            }
        };
        if text.is_empty() {
            continue;
        }
        match Message::parse(text) {
            Err(error) => {
                sink.send_text(error.to_json()).await;
            }
            Ok(Message::Request(request)) => {
                let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                    break Ok(());
                };
                let session = session.clone();
                let sink = sink.clone();
                let mut handling: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
                    if let Some(response) = session.reply_on(request, None).await {
                        // Waits for room; ends when the session closes or the writer stops.
                        sink.send_text(response.to_json()).await;
                        // Only now, with the reply in the channel before them, may what it
                        // announced (a task's questions, status, progress) follow it.
                        drop(response);
                    }
                    drop(permit);
                });
                // Start the request before reading on: whatever it decides without waiting
                // (the era at `initialize`, say) is decided before the next message is seen.
                if poll_once(handling.as_mut()).await.is_pending() {
                    requests.spawn(handling);
                }
            }
            Ok(other) => {
                session.handle(other).await;
            }
        }
        // Reap finished request tasks so the set does not grow without bound.
        while requests.try_join_next().is_some() {}
    };
    // The client closed its end: requests already read get a moment to answer (a piped,
    // one-shot client still gets its response). Then the session is closed, which cancels
    // whatever is left; cancelled requests get the same moment to unwind before they are
    // dropped. Tasks keep running until the process exits.
    let answered = drain(&mut requests).await;
    session.close();
    if !answered {
        drain(&mut requests).await;
    }
    requests.shutdown().await;
    finished.cancel();
    drop(sink);
    drop(session);
    // A client that stopped reading does not keep the server alive either.
    let write_result = match tokio::time::timeout(EOF_GRACE, &mut writer_task).await {
        Ok(joined) => joined.unwrap_or_else(|e| Err(std::io::Error::other(e))),
        Err(_) => {
            writer_task.abort();
            tracing::warn!("the client stopped reading; its last messages were dropped");
            Ok(())
        }
    };
    read_result?;
    write_result?;
    Ok(())
}

/// Waits up to [`EOF_GRACE`] for every request to finish; `true` when they all did.
async fn drain(requests: &mut JoinSet<()>) -> bool {
    tokio::time::timeout(EOF_GRACE, async {
        while requests.join_next().await.is_some() {}
    })
    .await
    .is_ok()
}

/// Polls `future` once; `Ready` when it finished without waiting.
async fn poll_once(mut future: Pin<&mut (dyn Future<Output = ()> + Send)>) -> Poll<()> {
    std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}

fn parse_error(message: &str) -> String {
    crate::jsonrpc::Response::error(
        None,
        crate::jsonrpc::ErrorObject::new(
            crate::jsonrpc::PARSE_ERROR,
            format!("parse error: {message}"),
        ),
    )
    .to_json()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OUTBOUND_CAPACITY;
    use serde_json::{Value, json};
    use std::time::Duration;
    use tokio::io::AsyncBufReadExt;

    fn server() -> Server {
        Server::builder()
            .name("io-test")
            .version("0")
            .build()
            .unwrap()
    }

    fn ping(id: usize) -> String {
        format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
        )
    }

    /// Serves a session over a 256-byte duplex pipe: the serving task and the client's ends.
    fn serve_over_small_pipe() -> (
        tokio::task::JoinHandle<Result<(), TransportError>>,
        tokio::io::ReadHalf<tokio::io::DuplexStream>,
        tokio::io::WriteHalf<tokio::io::DuplexStream>,
    ) {
        let (client, server_end) = tokio::io::duplex(256);
        let (server_read, server_write) = tokio::io::split(server_end);
        let serving = tokio::spawn(serve_io(server(), server_read, server_write));
        let (client_read, client_write) = tokio::io::split(client);
        (serving, client_read, client_write)
    }

    /// More requests than the output channel and the in-flight limit hold together.
    const FLOOD: usize = OUTBOUND_CAPACITY + MAX_IN_FLIGHT + 500;

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_holds_up_output_and_loses_no_response() {
        let (serving, client_read, mut client_write) = serve_over_small_pipe();
        let writing = tokio::spawn(async move {
            for id in 1..=FLOOD {
                client_write.write_all(ping(id).as_bytes()).await.unwrap();
            }
            // End of input (the read half keeps the stream itself open).
            client_write.shutdown().await.unwrap();
        });
        // Nobody reads: once the queue and the in-flight limit are full the server stops
        // reading, so the client cannot write all its requests.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!writing.is_finished(), "the server read on without bound");
        assert!(!serving.is_finished());
        // The client reads again: every request is answered, exactly once.
        let mut lines = BufReader::new(client_read).lines();
        let mut seen = vec![false; FLOOD + 1];
        for _ in 0..FLOOD {
            let line = lines.next_line().await.unwrap().expect("a response");
            let response: Value = serde_json::from_str(&line).unwrap();
            let id = response["id"].as_u64().unwrap() as usize;
            assert_eq!(response["result"], json!({}), "{response}");
            assert!(
                !std::mem::replace(&mut seen[id], true),
                "{id} answered twice"
            );
        }
        assert!(seen[1..].iter().all(|s| *s));
        // End of input ends the session cleanly.
        writing.await.unwrap();
        assert!(lines.next_line().await.unwrap().is_none());
        serving.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_went_away_never_hangs_a_waiting_sender() {
        let (serving, client_read, mut client_write) = serve_over_small_pipe();
        let writing = tokio::spawn(async move {
            for id in 1..=FLOOD {
                if client_write.write_all(ping(id).as_bytes()).await.is_err() {
                    break;
                }
            }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!serving.is_finished());
        // The client goes away without reading: senders waiting for room and the reader
        // waiting for a request slot all give up, and the transport returns.
        writing.abort();
        let _ = writing.await;
        drop(client_read);
        let served = tokio::time::timeout(Duration::from_secs(30), serving).await;
        let result = served.expect("the transport returned").unwrap();
        assert!(
            matches!(result, Ok(()) | Err(TransportError::Io(_))),
            "{result:?}"
        );
    }
}
