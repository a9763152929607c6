//! The InfiniBand encoding of the RNR NAK timer (IBTA table "Encoding for RNR NAK
//! Timer Field"): a 5-bit code naming one of 32 fixed delays.

use core::time::Duration;

/// Microseconds of each code; code 0 is the longest (655.36 ms).
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The code of the shortest delay not below `d` (so a sender never retries earlier than
/// asked); anything above 491.52 ms becomes code 0, 655.36 ms.
pub fn min_rnr_timer_code(d: Duration) -> u8 {
    let us = d.as_micros();
    (1..32u8)
        .find(|&c| u128::from(RNR_TIMER_US[usize::from(c)]) >= us)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_the_next_code() {
        assert_eq!(min_rnr_timer_code(Duration::ZERO), 1);
        assert_eq!(min_rnr_timer_code(Duration::from_micros(10)), 1);
        assert_eq!(min_rnr_timer_code(Duration::from_micros(11)), 2);
        assert_eq!(min_rnr_timer_code(Duration::from_millis(1)), 14);
        assert_eq!(min_rnr_timer_code(Duration::from_micros(491_520)), 31);
        assert_eq!(min_rnr_timer_code(Duration::from_millis(500)), 0);
        assert_eq!(min_rnr_timer_code(Duration::from_secs(60)), 0);
    }
}
