//! This process's stdin, read on a thread of its own.
//!
//! Tokio reads stdin on its blocking pool, and a runtime waits for its blocking pool when it
//! is dropped: a process stopped by a signal while stdin is open would hang in the read
//! until the client wrote a line. A thread of its own is not waited for.

use std::io::Read;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// How many chunks of input the reader thread may read ahead.
const AHEAD: usize = 16;

/// This process's stdin as an `AsyncRead`, fed by a reader thread.
pub(super) fn reader() -> ChannelReader {
    let (tx, rx) = mpsc::channel::<std::io::Result<Vec<u8>>>(AHEAD);
    let spawned = std::thread::Builder::new()
        .name("mcp-stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let chunk = match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => Ok(buf[..n].to_vec()),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => Err(e),
                };
                let failed = chunk.is_err();
                if tx.blocking_send(chunk).is_err() || failed {
                    break;
                }
            }
        });
    let rx = match spawned {
        Ok(_) => Some(rx),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the stdin reader thread");
            None
        }
    };
    ChannelReader {
        rx,
        chunk: Vec::new(),
        at: 0,
    }
}

/// Reads the chunks a thread sends; the end of the channel is the end of the input.
pub(super) struct ChannelReader {
    rx: Option<mpsc::Receiver<std::io::Result<Vec<u8>>>>,
    chunk: Vec<u8>,
    at: usize,
}

impl AsyncRead for ChannelReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        while this.at >= this.chunk.len() {
            let Some(rx) = this.rx.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            match rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.rx = None;
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(Some(Ok(chunk))) => {
                    this.chunk = chunk;
                    this.at = 0;
                }
            }
        }
        let n = out.remaining().min(this.chunk.len() - this.at);
        out.put_slice(&this.chunk[this.at..this.at + n]);
        this.at += n;
        Poll::Ready(Ok(()))
    }
}
