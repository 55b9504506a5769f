//! What the library logs, captured for a test to read.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

pub use tracing::Level;

/// The text the library logged (without colour codes) on this thread while a
/// [`capture`](Self::capture) guard lived.
///
/// ```no_run
/// use lock_tests::logs::{Level, Logged};
///
/// let logged = Logged::default();
/// {
///     let _capture = logged.capture(Level::WARN);
///     // ... the code under test ...
/// }
/// assert!(!logged.text().contains("retry"));
/// ```
#[derive(Clone, Default)]
pub struct Logged(Arc<Mutex<Vec<u8>>>);

impl Logged {
    /// Everything captured so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Captures the events of `level` and above on this thread until the guard is dropped.
    pub fn capture(&self, level: Level) -> tracing::subscriber::DefaultGuard {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
            .with_max_level(level)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }
}

impl std::io::Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logged {
    type Writer = Logged;

    fn make_writer(&'a self) -> Logged {
        self.clone()
    }
}

/// The events the library emitted on this thread while a [`capture`](Self::capture) guard
/// lived, each as its fields: for a test that checks what an event carries, field by field.
///
/// ```no_run
/// use lock_tests::logs::Events;
///
/// let events = Events::default();
/// {
///     let _capture = events.capture();
///     // ... the code under test ...
/// }
/// for event in events.named("slow lock acquire") {
///     assert_eq!(event.get("outcome"), Some("busy"));
/// }
/// ```
#[derive(Clone, Default)]
pub struct Events(Arc<Mutex<Vec<Event>>>);

/// One event: its level and fields (`message` among them), each as text (a string without
/// quotes, a `Display` value as displayed).
#[derive(Clone, Debug)]
pub struct Event {
    /// The event's level.
    pub level: Level,
    /// Its fields by name.
    pub fields: BTreeMap<String, String>,
}

impl Event {
    /// The field `name`, if the event has it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

impl Events {
    /// Captures every event on this thread until the guard is dropped.
    pub fn capture(&self) -> tracing::subscriber::DefaultGuard {
        use tracing_subscriber::layer::SubscriberExt as _;
        tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
    }

    /// The events captured so far whose message is `message`.
    pub fn named(&self, message: &str) -> Vec<Event> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|event| event.get("message") == Some(message))
            .cloned()
            .collect()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Event {
                level: *event.metadata().level(),
                fields: fields.0,
            });
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}
