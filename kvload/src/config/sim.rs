//! `--simulate SPEC`: the simulated server's parameters, parsed here (engine/sim.rs
//! simulates it).

/// The simulated server of `--simulate`.
#[derive(Debug, Clone, PartialEq)]
pub struct SimServer {
    /// Mean service rate, requests/s.
    pub service: f64,
    /// Constant latency added to every response, µs.
    pub base_us: f64,
    /// Log-normal spread of the service rate from server to server: drawn once per
    /// `--seed` (one search is one server).
    pub jitter: f64,
    /// Log-normal spread of the service rate from run to run of one server (each step
    /// of a search draws its own).
    pub noise: f64,
    /// The rate at which kvload's own CPUs would be saturated (None: never).
    pub client: Option<f64>,
    /// Log-normal spread of the service rate from window to window of one run.
    pub wnoise: f64,
    /// Log-normal spread of every latency from window to window (a host whose wake-ups
    /// and interrupts add more or less delay, whatever the load).
    pub lnoise: f64,
    /// Per window: the probability of a stall, its length (ns) and the share of stalls
    /// the host watch sees.
    pub stall: (f64, u64, f64),
    /// Mean wake-up latency (µs) of a request that finds the server idle.
    pub wake_us: f64,
}

/// `key`'s latency in µs, within 0..1 s: a bare number is µs, anything else a duration
/// (`50us`, `0.05ms`); `example` shows one in the error.
fn latency(key: &str, v: &str, example: &str) -> Result<f64, String> {
    let t = v.trim();
    let us = match t.parse::<f64>() {
        Ok(b) if b.is_finite() => Ok(b),
        Ok(_) => Err(()),
        Err(_) => super::spec::parse_duration(t)
            .map(|ns| ns as f64 / 1e3)
            .map_err(|_| ()),
    }
    .map_err(|_| format!("{key}: '{v}' is not a latency such as {example}"))?;
    if !(0.0..=1e6).contains(&us) {
        return Err(format!("{key}: '{v}' is outside 0..1 s"));
    }
    Ok(us)
}

fn rate(key: &str, v: &str) -> Result<f64, String> {
    super::spec::parse_rate(v).map_err(|e| format!("{key}: {e}"))
}

impl SimServer {
    /// `service=100k[,base=50us][,jitter=0.03][,client=170k]`. Err names what is wrong.
    pub fn parse(text: &str) -> Result<SimServer, String> {
        let mut s = SimServer {
            service: f64::NAN,
            base_us: 0.0,
            jitter: 0.0,
            noise: 0.0,
            client: None,
            wnoise: 0.0,
            lnoise: 0.0,
            stall: (0.0, 0, 0.0),
            wake_us: 0.0,
        };
        const KEYS: &str =
            "service=, base=, jitter=, noise=, client=, wnoise=, lnoise=, stall=, wake=";
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("'{part}' is not KEY=VALUE ({KEYS})"))?;
            match k.trim() {
                "service" => s.service = rate(k, v)?,
                "client" => s.client = Some(rate(k, v)?),
                "base" => s.base_us = latency(k, v, "50us")?,
                "wake" => s.wake_us = latency(k, v, "500us")?,
                "stall" => {
                    let parts: Vec<&str> = v.trim().split(':').collect();
                    let num = |x: &str| x.trim().parse::<f64>().ok().filter(|f| f.is_finite());
                    let (p, ms, seen) = match parts.as_slice() {
                        [p, ms] => (num(p), num(ms), Some(0.0)),
                        [p, ms, seen] => (num(p), num(ms), num(seen)),
                        _ => (None, None, None),
                    };
                    match (p, ms, seen) {
                        (Some(p), Some(ms), Some(seen))
                            if (0.0..=1.0).contains(&p)
                                && (0.0..=10_000.0).contains(&ms)
                                && (0.0..=1.0).contains(&seen) =>
                        {
                            s.stall = (p, (ms * 1e6) as u64, seen);
                        }
                        _ => {
                            return Err(format!(
                                "stall: '{v}' is not P:MS[:SEEN] (a probability per window, \
                                 a length in ms up to 10 s, the share the host watch sees)"
                            ));
                        }
                    }
                }
                "jitter" | "noise" | "wnoise" | "lnoise" => {
                    let j: f64 = v
                        .trim()
                        .parse()
                        .map_err(|_| format!("{k}: '{v}' is not a number such as 0.03"))?;
                    if !(j.is_finite() && (0.0..=1.0).contains(&j)) {
                        return Err(format!("{k}: {v} is outside 0..1"));
                    }
                    match k.trim() {
                        "jitter" => s.jitter = j,
                        "noise" => s.noise = j,
                        "lnoise" => s.lnoise = j,
                        _ => s.wnoise = j,
                    }
                }
                other => {
                    return Err(format!("unknown key '{other}' ({KEYS})"));
                }
            }
        }
        if s.service.is_nan() {
            return Err("service=RATE is required, e.g. service=100k".into());
        }
        if s.service > super::spec::MAX_RATE {
            return Err("service: above 10M requests/s".into());
        }
        Ok(s)
    }

    /// The spec as `--simulate` takes it (echoed in the JSON).
    pub fn text(&self) -> String {
        let mut t = format!(
            "service={},base={}us,jitter={},noise={}",
            self.service, self.base_us, self.jitter, self.noise
        );
        if let Some(c) = self.client {
            t.push_str(&format!(",client={c}"));
        }
        if self.wnoise > 0.0 {
            t.push_str(&format!(",wnoise={}", self.wnoise));
        }
        if self.lnoise > 0.0 {
            t.push_str(&format!(",lnoise={}", self.lnoise));
        }
        if self.stall.0 > 0.0 {
            t.push_str(&format!(
                ",stall={}:{}:{}",
                self.stall.0,
                self.stall.1 as f64 / 1e6,
                self.stall.2
            ));
        }
        if self.wake_us > 0.0 {
            t.push_str(&format!(",wake={}us", self.wake_us));
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spec_and_refuses_the_rest() {
        let s = SimServer::parse("service=100k, base=0.05ms, jitter=0.03, noise=0.1, client=170k")
            .unwrap();
        assert_eq!(
            (s.service, s.base_us, s.jitter, s.noise, s.client),
            (1e5, 50.0, 0.03, 0.1, Some(1.7e5))
        );
        for bad in [
            "",
            "base=50us",
            "service=-1",
            "service=100k,color=red",
            "service=100k,jitter=2",
            "service=100k,base=2s",
            "service",
            "service=20M",
        ] {
            assert!(SimServer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn latencies_in_any_unit() {
        let s = SimServer::parse("service=100k,base=0.05ms,wake=1ms").unwrap();
        assert_eq!((s.base_us, s.wake_us), (50.0, 1000.0));
        let s = SimServer::parse("service=100k,base=50,wake=500us").unwrap();
        assert_eq!((s.base_us, s.wake_us), (50.0, 500.0));
        assert!(SimServer::parse("service=100k,wake=soon").is_err());
    }
}
