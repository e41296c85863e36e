//! The offset stores (issue 40): `FileStore`'s atomic saves under SIGKILL,
//! its refusal of every bad file with an error naming it, its lock against
//! a second process, the merge of partial saves against a map model, and
//! the commit cycle `Tracker::flush_to`. Needs the `serde` feature (the
//! README's test command turns every feature on).
#![cfg(feature = "serde")]

use inflight::store::{CommitError, FileStore, MemoryStore, OffsetStore, StoreError};
use inflight::{FlushError, Tracker};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::Rng;

/// Taken by every test here: a child spawned by one test inherits, until
/// it starts its program, the lock file another test's store holds open,
/// and that store's reopening would find it locked (see `FileStore`).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A directory of its own for each test.
fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("inflight-store-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

type Store = FileStore<String, u64>;

// ---- Bad files ---------------------------------------------------------------

/// Opens a store on a file holding `text`: the error it gives.
fn open_bad(name: &str, text: &[u8]) -> (PathBuf, StoreError) {
    let path = dir(name).join("offsets.json");
    std::fs::write(&path, text).unwrap();
    let err = Store::open(&path).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains(&path.display().to_string()),
        "the error names the file: {shown}"
    );
    (path, err)
}

#[test]
fn a_missing_file_is_no_offsets_yet() {
    let _serial = serial();
    let path = dir("missing").join("offsets.json");
    let mut store = Store::open(&path).unwrap();
    assert!(store.load().unwrap().is_empty());
}

#[test]
fn an_empty_file_is_corrupt_not_empty() {
    let _serial = serial();
    let (_, err) = open_bad("empty", b"");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
}

#[test]
fn a_truncated_file_is_corrupt() {
    let _serial = serial();
    let path = dir("whole").join("offsets.json");
    let mut store = Store::open(&path).unwrap();
    let offsets = (0..20).map(|p| (format!("p{p}"), p * 1000)).collect();
    store.save(&offsets).unwrap();
    drop(store);
    let whole = std::fs::read(&path).unwrap();
    for cut in [1, whole.len() / 3, whole.len() / 2, whole.len() - 3] {
        let (_, err) = open_bad(&format!("truncated-{cut}"), &whole[..cut]);
        assert!(
            matches!(err, StoreError::Corrupt { .. }),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn corrupt_files_are_errors() {
    let _serial = serial();
    let cases: [(&str, &[u8]); 6] = [
        ("garbage", b"\x00\x01\x02 not json"),
        ("no-version", br#"{"format": "inflight-offsets", "offsets": []}"#),
        ("no-list", br#"{"format": "inflight-offsets", "version": 1}"#),
        (
            "wrong-type",
            br#"{"format": "inflight-offsets", "version": 1, "offsets": [{"partition": "p", "offset": "seven"}]}"#,
        ),
        (
            "no-offset",
            br#"{"format": "inflight-offsets", "version": 1, "offsets": [{"partition": "p"}]}"#,
        ),
        (
            "twice",
            br#"{"format": "inflight-offsets", "version": 1, "offsets": [{"partition": "p", "offset": 1}, {"partition": "p", "offset": 2}]}"#,
        ),
    ];
    for (name, text) in cases {
        let (_, err) = open_bad(name, text);
        assert!(matches!(err, StoreError::Corrupt { .. }), "{name}: {err}");
    }
}

#[test]
fn a_foreign_file_is_refused() {
    let _serial = serial();
    for (name, text) in [
        ("array", &b"[1, 2, 3]"[..]),
        (
            "other-format",
            br#"{"format": "connect-offsets", "version": 1, "offsets": []}"#,
        ),
        ("no-format", br#"{"p": 1}"#),
    ] {
        let (_, err) = open_bad(name, text);
        assert!(matches!(err, StoreError::Foreign { .. }), "{name}: {err}");
    }
}

#[test]
fn a_newer_version_is_refused() {
    let _serial = serial();
    let (_, err) = open_bad(
        "newer",
        br#"{"format": "inflight-offsets", "version": 2, "offsets": []}"#,
    );
    assert!(
        matches!(
            err,
            StoreError::Newer {
                version: 2,
                supported: 1,
                ..
            }
        ),
        "{err}"
    );
}

/// A partition whose `Serialize` fails: the save is refused, and the file
/// keeps what it held.
#[test]
fn an_offset_that_cannot_be_encoded_changes_nothing() {
    let _serial = serial();
    #[derive(Clone, Debug, PartialEq, Deserialize)]
    struct Bad(u64);
    impl Serialize for Bad {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            if self.0 == 13 {
                return Err(serde::ser::Error::custom("unlucky"));
            }
            s.serialize_u64(self.0)
        }
    }
    let path = dir("encode").join("offsets.json");
    let mut store: FileStore<String, Bad> = FileStore::open(&path).unwrap();
    store.save(&HashMap::from([("a".into(), Bad(1))])).unwrap();
    let err = store
        .save(&HashMap::from([
            ("a".into(), Bad(2)),
            ("b".into(), Bad(13)),
        ]))
        .unwrap_err();
    assert!(matches!(err, StoreError::Encode { .. }), "{err}");
    assert_eq!(store.load().unwrap(), HashMap::from([("a".into(), Bad(1))]));
}

/// An offset whose `Serialize` panics (user code, run before the store
/// changes): the panic leaves the file and the store as they were, and
/// the next save works.
#[test]
fn a_panicking_serialize_changes_nothing() {
    let _serial = serial();
    #[derive(Clone, Debug, PartialEq, Deserialize)]
    struct Boom(u64);
    impl Serialize for Boom {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            assert_ne!(self.0, 13, "a planned panic");
            s.serialize_u64(self.0)
        }
    }
    let path = dir("serialize-panic").join("offsets.json");
    let mut store: FileStore<String, Boom> = FileStore::open(&path).unwrap();
    store.save(&HashMap::from([("a".into(), Boom(1))])).unwrap();
    let saving = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.save(&HashMap::from([
            ("a".into(), Boom(2)),
            ("b".into(), Boom(13)),
        ]))
    }));
    assert!(saving.is_err(), "the planned panic");
    assert_eq!(
        store.load().unwrap(),
        HashMap::from([("a".into(), Boom(1))])
    );
    store.save(&HashMap::from([("b".into(), Boom(3))])).unwrap();
    let both = HashMap::from([("a".into(), Boom(1)), ("b".into(), Boom(3))]);
    drop(store);
    let mut store: FileStore<String, Boom> = FileStore::open(&path).unwrap();
    assert_eq!(store.load().unwrap(), both);
}

// ---- The lock ------------------------------------------------------------------

/// Child role: opens the store named by `INFLIGHT_STORE_CHILD_LOCK`, says
/// so, and holds it until its stdin ends. A no-op in a normal test run.
#[test]
fn child_holds_the_lock() {
    let Ok(path) = std::env::var("INFLIGHT_STORE_CHILD_LOCK") else {
        return;
    };
    let _store = Store::open(&path).unwrap();
    say("locked");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// A child's line to its parent, on stdout itself (the test harness
/// captures `println!`).
fn say(line: &str) {
    let mut out = std::io::stdout();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Runs this test binary's `test` alone, with `env`, its stdio piped.
fn child(test: &str, env: (&str, &Path)) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(env.0, env.1)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the child's stdout up to a line with `marker` (the harness may
/// print the test's name before it on the same line): what follows it.
fn read_until(out: &mut impl BufRead, marker: &str) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            return None;
        }
        if let Some(at) = line.find(marker) {
            return Some(line[at + marker.len()..].trim().to_string());
        }
    }
}

#[test]
fn a_store_held_by_another_process_is_refused_and_names_it() {
    let _serial = serial();
    let path = dir("locked").join("offsets.json");
    let mut holder = child("child_holds_the_lock", ("INFLIGHT_STORE_CHILD_LOCK", &path));
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    read_until(&mut out, "locked").expect("the child took the lock");
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::Locked { holder: Some(pid), .. } if pid == holder.id()),
        "{err}"
    );
    assert!(err.to_string().contains(&holder.id().to_string()), "{err}");
    drop(holder.stdin.take()); // ends the child
    assert!(holder.wait().unwrap().success());
    // Its lock went with it.
    Store::open(&path).unwrap();
}

#[test]
fn a_second_store_in_one_process_is_refused() {
    let _serial = serial();
    let path = dir("twice").join("offsets.json");
    let first = Store::open(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    drop(first);
    Store::open(&path).unwrap();
}

// ---- Crash consistency -----------------------------------------------------------

/// Partitions of the crash test: every save gives all of them one value.
const PARTITIONS: u64 = 512;

/// Child role: saves generation 1, 2, 3, … (every partition at the
/// generation, so that a mix shows), saying "saved N" after each save
/// returned, until killed. A no-op in a normal test run.
#[test]
fn child_saves_until_killed() {
    let Ok(path) = std::env::var("INFLIGHT_STORE_CHILD_SAVES") else {
        return;
    };
    let mut store = Store::open(&path).unwrap();
    let start = uniform(&store.load().unwrap()).map_or(0, |n| n + 1);
    for n in start.. {
        let offsets = (0..PARTITIONS).map(|p| (format!("p{p}"), n)).collect();
        store.save(&offsets).unwrap();
        say(&format!("saved {n}"));
    }
}

/// The one value every partition has, or `None` for an empty store;
/// panics on a mix.
fn uniform(offsets: &HashMap<String, u64>) -> Option<u64> {
    let first = *offsets.values().next()?;
    assert_eq!(
        offsets.len() as u64,
        PARTITIONS,
        "partitions lost: {offsets:?}"
    );
    assert!(
        offsets.values().all(|&o| o == first),
        "a torn store: {offsets:?}"
    );
    Some(first)
}

/// A child saves in a loop and is killed (SIGKILL) after a random number
/// of saves, often in the middle of one; after each kill the store loads
/// either the last save that returned or the one after it, whole, and
/// never an error.
#[test]
fn a_kill_at_any_point_of_a_save_leaves_the_old_or_the_new_offsets() {
    let _serial = serial();
    let path = dir("kill").join("offsets.json");
    let mut rng = Rng::new(40);
    let mut last = None;
    for round in 0..40 {
        let mut saver = child(
            "child_saves_until_killed",
            ("INFLIGHT_STORE_CHILD_SAVES", &path),
        );
        let mut out = BufReader::new(saver.stdout.take().unwrap());
        let mut returned = last;
        for _ in 0..rng.below(40) + 1 {
            let n = read_until(&mut out, "saved ").expect("the child saves");
            returned = Some(n.parse::<u64>().unwrap());
        }
        saver.kill().unwrap(); // SIGKILL
        saver.wait().unwrap();
        let mut store = Store::open(&path).expect("a store this crate wrote opens");
        let now = uniform(&store.load().unwrap());
        let returned = returned.expect("at least one save returned");
        assert!(
            now == Some(returned) || now == Some(returned + 1),
            "round {round}: {now:?} after save {returned} returned"
        );
        last = now;
    }
}

/// A crash between writing the temporary file and renaming it leaves the
/// temporary file behind, perhaps torn: it is never read, and the next
/// save writes over it.
#[test]
fn a_torn_temporary_file_is_never_read() {
    let _serial = serial();
    let path = dir("torn-temp").join("offsets.json");
    let mut store = Store::open(&path).unwrap();
    store.save(&HashMap::from([("a".into(), 1)])).unwrap();
    drop(store);
    let temp = path.with_file_name("offsets.json.tmp");
    std::fs::write(&temp, br#"{"format": "inflight-offsets", "vers"#).unwrap();
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.load().unwrap(), HashMap::from([("a".into(), 1)]));
    store.save(&HashMap::from([("b".into(), 2)])).unwrap();
    drop(store);
    let mut store = Store::open(&path).unwrap();
    let both = HashMap::from([("a".into(), 1), ("b".into(), 2)]);
    assert_eq!(store.load().unwrap(), both);
}

// ---- The merge, against a map model -------------------------------------------------

/// Random saves of partial maps, removes and reopenings of a file store,
/// each checked against a map and against `MemoryStore`.
#[test]
fn saves_merge_and_removes_forget_as_a_map_does() {
    let _serial = serial();
    let path = dir("merge").join("offsets.json");
    let mut rng = Rng::new(7);
    let mut model: HashMap<String, u64> = HashMap::new();
    let mut memory = MemoryStore::new();
    let mut store = Store::open(&path).unwrap();
    for step in 0..400 {
        match rng.below(10) {
            0..=5 => {
                let offsets: HashMap<String, u64> = (0..rng.below(5))
                    .map(|_| (format!("p{}", rng.below(12)), rng.below(1 << 40)))
                    .collect();
                model.extend(offsets.clone());
                store.save(&offsets).unwrap();
                memory.save(&offsets).unwrap();
            }
            6 | 7 => {
                let gone: Vec<String> = (0..rng.below(3))
                    .map(|_| format!("p{}", rng.below(12)))
                    .collect();
                for p in &gone {
                    model.remove(p);
                }
                store.remove(&gone).unwrap();
                memory.remove(&gone).unwrap();
            }
            8 => {
                drop(store);
                store = Store::open(&path).unwrap();
            }
            _ => {}
        }
        assert_eq!(store.load().unwrap(), model, "step {step}");
        assert_eq!(memory.load().unwrap(), model, "step {step}");
    }
}

/// Struct partitions and offsets, as a Connect-style source has them.
#[test]
fn struct_partitions_and_offsets_round_trip() {
    let _serial = serial();
    #[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    struct Table {
        schema: String,
        name: String,
    }
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Cursor {
        lsn: u64,
        row: Option<String>,
    }
    let path = dir("structs").join("offsets.json");
    let table = Table {
        schema: "public".into(),
        name: "orders".into(),
    };
    let cursor = Cursor {
        lsn: 77,
        row: Some("id=9".into()),
    };
    let mut store: FileStore<Table, Cursor> = FileStore::open(&path).unwrap();
    store
        .save(&HashMap::from([(table.clone(), cursor.clone())]))
        .unwrap();
    drop(store);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("\"orders\"") && text.contains("\"id=9\""),
        "{text}"
    );
    let mut store: FileStore<Table, Cursor> = FileStore::open(&path).unwrap();
    assert_eq!(store.load().unwrap()[&table], cursor);
}

// ---- The commit cycle -------------------------------------------------------------

#[test]
fn flush_to_saves_then_commits_and_a_failed_save_commits_nothing() {
    let _serial = serial();
    let root = dir("cycle");
    let path = root.join("task").join("offsets.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tracker = Tracker::new();
    let mut store = Store::open(&path).unwrap();
    let a = tracker.send("a".to_string(), 1).unwrap();
    tracker.ack(a).unwrap();
    let saved = tracker
        .flush_to(&mut store, Duration::from_secs(60))
        .unwrap();
    assert_eq!(saved, HashMap::from([("a".into(), 1)]));
    // The store's directory goes away: the save fails, nothing commits.
    let b = tracker.send("b".to_string(), 2).unwrap();
    tracker.ack(b).unwrap();
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    let err = tracker
        .flush_to(&mut store, Duration::from_secs(60))
        .unwrap_err();
    assert!(
        matches!(err, CommitError::Store(StoreError::Io { .. })),
        "{err}"
    );
    // The next commit covers b again, and a is still stored.
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let saved = tracker
        .flush_to(&mut store, Duration::from_secs(60))
        .unwrap();
    assert_eq!(saved, HashMap::from([("b".into(), 2)]));
    let expected = HashMap::from([("a".into(), 1), ("b".into(), 2)]);
    assert_eq!(store.load().unwrap(), expected);
    // A failed record: the flush fails, nothing is saved.
    let c = tracker.send("c".to_string(), 3).unwrap();
    tracker.fail(c).unwrap();
    let err = tracker
        .flush_to(&mut store, Duration::from_secs(60))
        .unwrap_err();
    assert!(
        matches!(err, CommitError::Flush(FlushError::Failed { .. })),
        "{err}"
    );
    assert_eq!(store.load().unwrap(), expected);
}
