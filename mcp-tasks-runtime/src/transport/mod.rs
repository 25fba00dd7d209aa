//! Transports: newline-delimited JSON over any byte stream, and stdio.

#[cfg(feature = "http")]
pub mod http;
mod io;
mod stdin;

pub use io::{TransportError, serve_io};

use crate::server::Server;

impl Server {
    /// Serves one client on this process's stdin and stdout until stdin closes, or until
    /// `SIGTERM` or `SIGINT`; then shuts down gracefully (see [`Server::shutdown`] and
    /// [`lifecycle`](crate::lifecycle)): no new tasks, the running ones may finish for the
    /// [`shutdown_grace`](crate::ServerBuilder::shutdown_grace) while the client is still
    /// served, then the rest are handed off. End of stdin takes the same path. `SIGUSR1` and
    /// `SIGUSR2` pause and resume task creation.
    ///
    /// Only MCP messages are written to stdout; send logs to stderr.
    pub async fn serve_stdio(&self) -> Result<(), TransportError> {
        let signals = self.stop_signals();
        let serving = serve_io(self.clone(), stdin::reader(), tokio::io::stdout());
        crate::lifecycle::serve_then_shut_down(self, self.shutdown_grace(), serving, &signals)
            .await
            .unwrap_or(Ok(()))
    }
}
