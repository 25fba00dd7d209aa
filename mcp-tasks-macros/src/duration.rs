//! Durations written in the attribute (`"500ms"`, `"2s"`, `"1m"`, `"1h"`), read at compile
//! time so that a typo is an error on the literal rather than a panic at startup.

/// Why a duration string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// Not a number followed by a unit.
    Malformed,
    /// The duration is zero.
    Zero,
    /// More milliseconds than a `u64` holds.
    TooLong,
}

/// The units the attribute accepts, in the order the error message lists them.
pub(crate) const UNITS: &str = "`ms`, `s`, `m` or `h`";

/// Reads `<digits><unit>` into milliseconds. Digits may be grouped with `_`.
pub(crate) fn parse_millis(text: &str) -> Result<u64, DurationError> {
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .ok_or(DurationError::Malformed)?;
    let (number, unit) = text.split_at(split);
    let factor: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(DurationError::Malformed),
    };
    let digits: String = number.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || number.starts_with('_') {
        return Err(DurationError::Malformed);
    }
    // Every character left is an ASCII digit, so the only way to fail is overflow.
    let count: u64 = digits.parse().map_err(|_| DurationError::TooLong)?;
    let millis = count.checked_mul(factor).ok_or(DurationError::TooLong)?;
    if millis == 0 {
        return Err(DurationError::Zero);
    }
    Ok(millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_converts_to_milliseconds() {
        assert_eq!(parse_millis("250ms"), Ok(250));
        assert_eq!(parse_millis("2s"), Ok(2_000));
        assert_eq!(parse_millis("3m"), Ok(180_000));
        assert_eq!(parse_millis("1h"), Ok(3_600_000));
        assert_eq!(parse_millis("1_500ms"), Ok(1_500));
    }

    #[test]
    fn malformed_durations_are_refused() {
        for bad in [
            "", "s", "2", "2x", "2 s", "-1s", "1.5s", "2S", "_1s", "1sms", "2d",
        ] {
            assert_eq!(parse_millis(bad), Err(DurationError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn zero_and_overflow_are_refused() {
        assert_eq!(parse_millis("0s"), Err(DurationError::Zero));
        assert_eq!(parse_millis("0_0ms"), Err(DurationError::Zero));
        assert_eq!(
            parse_millis("18446744073709551615h"),
            Err(DurationError::TooLong)
        );
        assert_eq!(
            parse_millis("99999999999999999999999ms"),
            Err(DurationError::TooLong)
        );
    }
}
