//! What a worker reports, one line each on a worker process's stdout, and
//! how the driver reads them back.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// What a worker reports; one line each on a worker process's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerEvent {
    /// Now owns these source partitions (after the hand-off wait).
    Assigned(Vec<i32>),
    /// Handed these off.
    Revoked(Vec<i32>),
    /// A save in the progress store (the `count`th), before the group
    /// commit, of these partitions' next offsets.
    Committed {
        count: u64,
        next: BTreeMap<i32, u64>,
    },
    /// The previous owner of `partition` did not release it in time
    /// (killed): resumed from its last progress.
    GaveUp { partition: i32, holder: String },
    /// Something failed (a commit, a drain, a refused record).
    Error(String),
}

fn list(partitions: &[i32]) -> String {
    if partitions.is_empty() {
        return "-".into();
    }
    let names: Vec<String> = partitions.iter().map(i32::to_string).collect();
    names.join(",")
}

fn parse_list(text: &str) -> Option<Vec<i32>> {
    if text == "-" {
        return Some(Vec::new());
    }
    text.split(',').map(|p| p.parse().ok()).collect()
}

impl fmt::Display for WorkerEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerEvent::Assigned(p) => write!(f, "assigned {}", list(p)),
            WorkerEvent::Revoked(p) => write!(f, "revoked {}", list(p)),
            WorkerEvent::Committed { count, next } => {
                let next: Vec<String> = next.iter().map(|(p, n)| format!("{p}:{n}")).collect();
                write!(f, "committed {count} {}", next.join(","))
            }
            WorkerEvent::GaveUp { partition, holder } => write!(f, "gave_up {partition} {holder}"),
            WorkerEvent::Error(e) => write!(f, "error {e}"),
        }
    }
}

impl WorkerEvent {
    /// An event from its line ([`Display`](fmt::Display)); `None` for other
    /// lines.
    pub fn parse(line: &str) -> Option<WorkerEvent> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "assigned" => parse_list(rest).map(WorkerEvent::Assigned),
            "revoked" => parse_list(rest).map(WorkerEvent::Revoked),
            "committed" => {
                let (count, next) = rest.split_once(' ').unwrap_or((rest, ""));
                let next = next
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|pair| {
                        let (p, n) = pair.split_once(':')?;
                        Some((p.parse().ok()?, n.parse().ok()?))
                    })
                    .collect::<Option<_>>()?;
                Some(WorkerEvent::Committed {
                    count: count.parse().ok()?,
                    next,
                })
            }
            "gave_up" => {
                let (p, holder) = rest.split_once(' ')?;
                Some(WorkerEvent::GaveUp {
                    partition: p.parse().ok()?,
                    holder: holder.into(),
                })
            }
            "error" => Some(WorkerEvent::Error(rest.into())),
            _ => None,
        }
    }
}

/// Where the events go.
pub type Events = Arc<dyn Fn(WorkerEvent) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_their_lines() {
        let events = [
            WorkerEvent::Assigned(vec![0, 3, 5]),
            WorkerEvent::Assigned(vec![]),
            WorkerEvent::Revoked(vec![7]),
            WorkerEvent::Committed {
                count: 12,
                next: [(0, 100), (3, 7)].into_iter().collect(),
            },
            WorkerEvent::GaveUp {
                partition: 2,
                holder: "w3.1".into(),
            },
            WorkerEvent::Error("ledger Claim: x y".into()),
        ];
        for event in events {
            assert_eq!(WorkerEvent::parse(&event.to_string()), Some(event));
        }
        assert_eq!(WorkerEvent::parse("stopped ok"), None);
    }
}
