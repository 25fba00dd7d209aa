//! Transports: newline-delimited JSON over any byte stream, and stdio.

#[cfg(feature = "http")]
pub mod http;
mod io;

pub use io::{TransportError, serve_io};

use crate::server::Server;

impl Server {
    /// Serves one client on this process's stdin and stdout until stdin closes.
    ///
    /// Only MCP messages are written to stdout; send logs to stderr.
    pub async fn serve_stdio(&self) -> Result<(), TransportError> {
        serve_io(self.clone(), tokio::io::stdin(), tokio::io::stdout()).await
    }
}
