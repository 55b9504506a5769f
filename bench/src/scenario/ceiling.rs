//! The server's own ceiling on this machine: `redis-benchmark` against the same server, for
//! PING, SET and EVALSHA of a trivial script, with its default 50 connections and with one
//! connection (the ceiling of one task doing one request at a time).

use std::process::Command;

use super::Metric;
use crate::BenchError;
use crate::server::Target;

/// One redis-benchmark invocation: its arguments, its request count, and which of the rates it
/// prints (by label) become which metric.
type Run<'a> = (&'a [&'a str], u64, &'a [(&'a str, &'static str)]);

/// The trivial script whose EVALSHA is timed.
const TRIVIAL_SCRIPT: &str = "return 1";

pub async fn measure(target: &Target, sha: &str, requests: u64) -> Result<Vec<Metric>, BenchError> {
    let single = (requests / 5).max(1000);
    let runs: [Run<'_>; 4] = [
        (
            &["-t", "ping,set"],
            requests,
            &[
                ("PING_INLINE", "PING_INLINE"),
                ("PING_MBULK", "PING_MBULK"),
                ("SET", "SET"),
            ],
        ),
        (&["evalsha", sha, "0"], requests, &[("evalsha", "EVALSHA")]),
        (
            &["-c", "1", "-t", "ping"],
            single,
            &[("PING_MBULK", "PING_MBULK_1_client")],
        ),
        (
            &["-c", "1", "evalsha", sha, "0"],
            single,
            &[("evalsha", "EVALSHA_1_client")],
        ),
    ];
    let mut metrics = Vec::new();
    for (args, requests, wanted) in runs {
        let output = run_redis_benchmark(target, args, requests).await?;
        let rates = parse_rates(&output);
        for &(label, metric) in wanted {
            let rate = rates
                .iter()
                .find(|(found, _)| found.starts_with(label))
                .map(|&(_, rate)| rate)
                .ok_or_else(|| {
                    BenchError::new(format!(
                        "redis-benchmark printed no rate for {label}:\n{output}"
                    ))
                })?;
            metrics.push(Metric::new(metric, "req/s", rate));
        }
    }
    Ok(metrics)
}

/// Loads the trivial script on the server and returns its SHA1.
pub async fn load_script(target: &Target) -> Result<String, BenchError> {
    let client = redis::Client::open(target.url())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    Ok(redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(TRIVIAL_SCRIPT)
        .query_async(&mut conn)
        .await?)
}

async fn run_redis_benchmark(
    target: &Target,
    args: &[&str],
    requests: u64,
) -> Result<String, BenchError> {
    let mut command = Command::new("redis-benchmark");
    command
        .args(["-h", target.host(), "-p", &target.port().to_string()])
        .args(["-q", "-n", &requests.to_string()]);
    if let Some(password) = target.password() {
        command.args(["-a", password, "--no-auth-warning"]);
    }
    command.args(args);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .map_err(|err| BenchError::new(format!("redis-benchmark: {err}")))?
        .map_err(|err| BenchError::new(format!("cannot run redis-benchmark: {err}")))?;
    if !output.status.success() {
        return Err(BenchError::new(format!(
            "redis-benchmark {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `(label, requests per second)` of each `LABEL: N requests per second` result. With `-q` the
/// progress lines end in `\r` and the result follows on the same line.
fn parse_rates(output: &str) -> Vec<(String, f64)> {
    output
        .split(['\r', '\n'])
        .filter_map(|line| {
            let (label, rest) = line.split_once(": ")?;
            let (rate, _) = rest.split_once(" requests per second")?;
            Some((label.trim().to_owned(), rate.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_read_past_progress_lines() {
        let output = "PING_INLINE: rps=0.0 (overall: nan) avg_msec=nan (overall: nan)\r\
                      PING_INLINE: 98039.22 requests per second, p50=0.271 msec\n\
                      SET: 87719.30 requests per second, p50=0.303 msec\n\
                      evalsha 6a1b 0: 76923.08 requests per second, p50=0.335 msec\n";
        let rates = parse_rates(output);
        assert_eq!(
            rates,
            vec![
                ("PING_INLINE".to_owned(), 98039.22),
                ("SET".to_owned(), 87719.30),
                ("evalsha 6a1b 0".to_owned(), 76923.08),
            ]
        );
    }
}
