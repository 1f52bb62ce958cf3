//! The bits of PHP and MySQL behaviour the replies depend on: how PHP prints
//! a float, `htmlspecialchars`, PHP's lenient numeric casts and
//! `mysqli::real_escape_string`.

/// `echo $float` with PHP's default `precision = 14`: up to 14 significant
/// digits, trailing zeros dropped, no `.0` for whole numbers, scientific
/// (`1.0E+25`, `1.5E-5`) below 1e-4 and from 1e15 on.
pub fn float(x: f64) -> String {
    if x.is_nan() {
        return "NAN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "INF".into() } else { "-INF".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // Rust rounds `{:e}` correctly, like PHP's zend_gcvt (dtoa mode 2).
    let s = format!("{:.13e}", x.abs());
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    while digits.len() > 1 && digits.ends_with('0') {
        digits.pop();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    if !(-4..15).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { "0" } else { rest };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}.{rest}E{esign}{}", exp.abs());
    }
    if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        let zeros = "0".repeat(int_len - digits.len());
        format!("{sign}{digits}{zeros}")
    } else {
        let (i, f) = digits.split_at(int_len);
        format!("{sign}{i}.{f}")
    }
}

/// `htmlspecialchars($s)`: `&`, `<`, `>`, `"`, and (PHP >= 8.1, `apos`)
/// `'` as `&#039;`.
pub fn html(s: &str, apos: bool) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' if apos => out.push_str("&#039;"),
            c => out.push(c),
        }
    }
    out
}

/// The numeric prefix of `s` as PHP's casts see it (leading whitespace
/// skipped, then sign, digits, fraction, exponent); "" if none.
fn numeric_prefix(s: &str) -> &str {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let b = t.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut has_digits = i > int_start;
    if i < b.len() && b[i] == b'.' {
        let f = i + 1;
        let mut j = f;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > f || has_digits {
            has_digits |= j > f;
            i = j;
        }
    }
    if !has_digits {
        return "";
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let d = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > d {
            i = j;
        }
    }
    &t[..i]
}

/// PHP's `is_numeric()`: the whole string (surrounding white space aside)
/// is a number.
pub fn is_numeric(s: &str) -> bool {
    let t = s.trim_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    !t.is_empty() && numeric_prefix(t).len() == t.len()
}

/// `(double)$s`: lenient, `"12abc"` → 12, `"abc"` → 0.
pub fn to_float(s: &str) -> f64 {
    let p = numeric_prefix(s);
    let p = p.strip_suffix('.').unwrap_or(p);
    p.parse().unwrap_or(0.0)
}

/// `(int)$s`: lenient like [`to_float`], truncated toward zero and
/// saturated.
pub fn to_int(s: &str) -> i64 {
    let f = to_float(s);
    if f.is_nan() {
        0
    } else {
        f as i64
    }
}

/// PHP truthiness of a string: "" and "0" are false.
pub fn truthy(s: &str) -> bool {
    !(s.is_empty() || s == "0")
}

/// `mysqli::real_escape_string`: a backslash before NUL, LF, CR, `\`, `'`,
/// `"` and ^Z.
pub fn sql_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '\x1a' => out.push_str("\\Z"),
            c => out.push(c),
        }
    }
    out
}

/// Whether [`sql_escape`] changes `s` (then a doubly escaped lookup by
/// name cannot find it).
pub fn needs_sql_escape(s: &str) -> bool {
    s.contains(['\0', '\n', '\r', '\\', '\'', '"', '\x1a'])
}

/// `date('r', t)` in UTC: `Sat, 21 Nov 2026 09:12:42 +0000`.
pub fn rfc2822(t: i64) -> String {
    let days = t.div_euclid(86400);
    let rem = t.rem_euclid(86400);
    let (y, m, d) = civil(days);
    const WD: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MON: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} +0000",
        WD[days.rem_euclid(7) as usize],
        d,
        MON[(m - 1) as usize],
        y,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Civil date (y, m, d) of a day count since 1970-01-01.
pub(crate) fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_like_php() {
        assert_eq!(float(1795252215.63352), "1795252215.6335");
        assert_eq!(float(1795255815.552967), "1795255815.553");
        assert_eq!(float(0.21946763032407), "0.21946763032407");
        assert_eq!(float(72291.644688767), "72291.644688767");
        assert_eq!(float(20.04153), "20.04153");
        assert_eq!(float(0.0), "0");
        assert_eq!(float(1.0), "1");
        assert_eq!(float(1795259210.0), "1795259210");
        assert_eq!(float(0.5), "0.5");
        assert_eq!(float(1e15), "1.0E+15");
        assert_eq!(float(1.5e-5), "1.5E-5");
        assert_eq!(float(0.0001), "0.0001");
        assert_eq!(float(-2.5), "-2.5");
        assert_eq!(float(100000000000000.0), "100000000000000");
        assert_eq!(float(0.1 + 0.2), "0.3");
    }

    #[test]
    fn lenient_casts() {
        assert_eq!(to_int("12abc"), 12);
        assert_eq!(to_int("abc"), 0);
        assert_eq!(to_int(" 42"), 42);
        assert_eq!(to_int("1e3"), 1000);
        assert_eq!(to_int("-7.9"), -7);
        assert_eq!(to_float("1795255815.552967"), 1795255815.552967);
        assert_eq!(to_float("5."), 5.0);
        assert_eq!(to_float(".5x"), 0.5);
        assert_eq!(to_float(""), 0.0);
        assert_eq!(to_float("0x10"), 0.0);
    }

    #[test]
    fn escapes() {
        assert_eq!(html("<a href='x'>&\"", true), "&lt;a href=&#039;x&#039;&gt;&amp;&quot;");
        assert_eq!(html("'", false), "'");
        assert_eq!(sql_escape("a'b\\c\n"), "a\\'b\\\\c\\n");
        assert_eq!(rfc2822(1795252362), "Sat, 21 Nov 2026 09:12:42 +0000");
    }

    #[test]
    fn numeric() {
        assert!(is_numeric("0"));
        assert!(is_numeric(" 12"));
        assert!(is_numeric("1.5e3"));
        assert!(!is_numeric("abc"));
        assert!(!is_numeric("12abc"));
        assert!(!is_numeric(""));
        assert!(!is_numeric("."));
    }
}
