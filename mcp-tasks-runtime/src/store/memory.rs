//! The in-memory task store (being written).

/// The in-memory task store.
#[derive(Debug, Default)]
pub struct MemoryTaskStore {}
