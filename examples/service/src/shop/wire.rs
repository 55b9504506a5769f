//! What the shop service answers, as JSON: the routes, the outcome of an order and its status
//! code.

use serde::{Deserialize, Serialize};

/// The route that answers `ok` once the service is up.
pub const HEALTH_PATH: &str = "/health";

/// The route of an order, as axum matches it: `POST /orders/<user_id>`.
pub const ORDER_ROUTE: &str = "/orders/{user_id}";

/// The path of `user_id`'s order, on [`ORDER_ROUTE`].
pub fn order_path(user_id: u64) -> String {
    format!("/orders/{user_id}")
}

/// What became of one order request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// An order was recorded and one item taken from stock.
    Placed,
    /// The user already has an order; nothing was written. Retrying an order is safe.
    Duplicate,
    /// No stock left; nothing was written.
    SoldOut,
    /// The database refused the write: a newer lock holder had written with a higher fencing
    /// token, so this instance had lost its lock. Nothing was written.
    StaleRefused,
    /// A lock stayed busy for the whole wait.
    Busy,
    /// A lock's lease was lost while the request held it (the instance stalled past its
    /// lease): the request was stopped at its next `.await`. What it had committed before
    /// stands, so the order may have been placed after all: asking again answers `duplicate`
    /// then.
    LeaseLost,
    /// The lock server or the database failed.
    Failed,
}

impl Outcome {
    /// Every outcome, in the order reports list them.
    pub const ALL: [Outcome; 7] = [
        Outcome::Placed,
        Outcome::Duplicate,
        Outcome::SoldOut,
        Outcome::StaleRefused,
        Outcome::LeaseLost,
        Outcome::Busy,
        Outcome::Failed,
    ];

    /// The HTTP status the service answers with.
    pub fn status(self) -> u16 {
        match self {
            Outcome::Placed => 201,
            Outcome::Duplicate => 200,
            Outcome::SoldOut | Outcome::StaleRefused => 409,
            Outcome::Busy | Outcome::LeaseLost => 503,
            Outcome::Failed => 500,
        }
    }

    /// The name used in JSON and in reports: `placed`, `sold_out`, ...
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Placed => "placed",
            Outcome::Duplicate => "duplicate",
            Outcome::SoldOut => "sold_out",
            Outcome::StaleRefused => "stale_refused",
            Outcome::LeaseLost => "lease_lost",
            Outcome::Busy => "busy",
            Outcome::Failed => "failed",
        }
    }
}

/// The body of an answer to `POST /orders/<user_id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderAnswer {
    /// What became of the request.
    pub outcome: Outcome,
    /// The instance that answered (its `--name`).
    pub instance: String,
    /// Why it failed, for [`Outcome::LeaseLost`], [`Outcome::Busy`] and [`Outcome::Failed`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_back_as_written() {
        let answer = OrderAnswer {
            outcome: Outcome::SoldOut,
            instance: "shop-2".to_owned(),
            error: None,
        };
        let json = serde_json::to_string(&answer).expect("serializes");
        assert_eq!(json, r#"{"outcome":"sold_out","instance":"shop-2"}"#);
        assert_eq!(
            serde_json::from_str::<OrderAnswer>(&json).expect("parses"),
            answer
        );
    }

    #[test]
    fn outcome_names_are_their_json_names() {
        for outcome in Outcome::ALL {
            let json = serde_json::to_string(&outcome).expect("serializes");
            assert_eq!(json, format!("\"{}\"", outcome.name()));
        }
    }
}
