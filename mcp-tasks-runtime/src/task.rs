//! Task identity and time: ids from the operating system's random number generator and
//! RFC 3339 timestamps.

use std::time::SystemTime;

/// A fresh random id: 128 bits from the OS RNG (122 of them random in the UUID v4 layout),
/// written as a lowercase UUID.
pub fn random_id() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the operating system's random number generator failed");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A time as RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T15:30:30.123Z`.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_uuid_v4_shaped_and_distinct() {
        let a = random_id();
        let b = random_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let t = rfc3339(SystemTime::UNIX_EPOCH);
        assert_eq!(t, "1970-01-01T00:00:00.000Z");
    }
}
