//! The wire adapters: the only modules that know each protocol era's method set, field
//! names and error rules.

pub(crate) mod classify;
pub(crate) mod params;
pub mod v2025_11_25;
pub mod v2026_07_28;
