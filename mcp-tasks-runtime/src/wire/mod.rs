//! The wire adapters: the only modules that know each protocol era's method set, field
//! names and error rules.

pub(crate) mod classify;
pub(crate) mod params;
pub mod v2025_11_25;
pub mod v2026_07_28;

/// The protocol eras every transport serves, as logs name them.
pub(crate) const ERAS: &str = "2025-11-25 (with tasks), 2026-07-28 (with the tasks extension)";
