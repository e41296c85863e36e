//! Tracker ids repeat only after 256 trackers (`Ticket`'s docs). A test
//! binary of its own: no other test creates trackers meanwhile.

#[test]
fn consecutive_trackers_get_distinct_ids() {
    let ids: std::collections::HashSet<u64> = (0..256)
        .map(|_| {
            let tracker = inflight::Tracker::<u8, u8>::new();
            tracker.send(0, 0).unwrap().into_raw() >> 56
        })
        .collect();
    assert_eq!(ids.len(), 256, "256 consecutive trackers share ids");
}
