//! The shared backend test suite (being written).
