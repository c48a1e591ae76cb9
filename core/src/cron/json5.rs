//! The JSON5 of crontab payloads, read as JavaScript's `JSON5.parse` then `JSON.stringify`
//! would leave it: numbers are JavaScript numbers (so `1.0` is `1`, and `Infinity` and
//! `NaN` become `null`), a repeated key keeps its last value, and a lone surrogate escape
//! becomes U+FFFD. Nesting is limited to [`MAX_DEPTH`] so that no input exhausts the stack.
//!
//! Written here rather than taken from a crate to control exactly those points, to report
//! byte offsets, and to never panic. The text is part of one crontab line, whose caller
//! has refused line breaks, so a `//` comment runs to the end and no string continues
//! over a line.

use serde_json::{Map, Number, Value};

/// Deepest nesting of objects and arrays accepted (serde_json's own limit).
pub(super) const MAX_DEPTH: usize = 128;

/// A failure: the byte offset and what was expected there.
type Failure = (usize, String);

/// Parse `text`, which must be exactly one JSON5 object (comments and whitespace around it
/// allowed).
pub(super) fn parse_object(text: &str) -> Result<Map<String, Value>, Failure> {
    let mut p = Parser { text, pos: 0, depth: 0 };
    p.skip_trivia()?;
    if p.peek() != Some('{') {
        return Err(p.fail("expected '{'"));
    }
    let map = p.object()?;
    p.skip_trivia()?;
    match p.peek() {
        None => Ok(map),
        Some(c) => Err(p.fail(&format!("unexpected {} after the payload object", show(c)))),
    }
}

/// The payload as one line of JSON, which is also JSON5 that [`parse_object`] reads back to
/// the same map: JSON's output with U+2028 and U+2029 escaped, as a crontab line must not
/// contain them.
pub(super) fn to_line(map: &Map<String, Value>) -> String {
    Value::Object(map.clone()).to_string().replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029")
}

/// `value` with every number made a JavaScript number, as parsing its JSON5 text would
/// give; fails if it nests deeper than [`MAX_DEPTH`].
pub(super) fn normalize(value: &Value, depth: usize) -> Result<Value, String> {
    let nested = |depth: usize| {
        if depth >= MAX_DEPTH {
            Err(format!("the payload nests deeper than {MAX_DEPTH} levels"))
        } else {
            Ok(depth + 1)
        }
    };
    Ok(match value {
        Value::Number(n) => n.as_f64().map_or(Value::Null, js_number),
        Value::Array(items) => {
            let depth = nested(depth)?;
            Value::Array(items.iter().map(|v| normalize(v, depth)).collect::<Result<_, _>>()?)
        }
        Value::Object(map) => {
            let depth = nested(depth)?;
            let entries = map.iter().map(|(k, v)| Ok((k.clone(), normalize(v, depth)?)));
            Value::Object(entries.collect::<Result<_, String>>()?)
        }
        Value::Null | Value::Bool(_) | Value::String(_) => value.clone(),
    })
}

/// A JavaScript number as `JSON.stringify` keeps it: integral values as integers,
/// non-finite ones as `null`.
fn js_number(x: f64) -> Value {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if !x.is_finite() {
        Value::Null
    } else if x.fract() == 0.0 && (-TWO_63..0.0).contains(&x) {
        Value::from(x as i64)
    } else if x.fract() == 0.0 && (0.0..2.0 * TWO_63).contains(&x) {
        Value::from(x as u64)
    } else {
        Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

fn show(c: char) -> String {
    format!("'{}'", c.escape_debug())
}

/// Whitespace as JavaScript's `\s` and `trim()` see it, which JSON5 takes too (and the
/// crontab parser, to split a line as graphile-worker does).
pub(super) fn is_js_space(c: char) -> bool {
    (c.is_whitespace() && c != '\u{85}') || c == '\u{feff}'
}

/// Approximates ECMAScript's `IdentifierStart` (Unicode letters, `$`, `_`).
fn is_identifier_start(c: char) -> bool {
    c == '$' || c == '_' || c.is_alphabetic()
}

/// Approximates `IdentifierPart` (adds digits and the zero-width joiners).
fn is_identifier_part(c: char) -> bool {
    is_identifier_start(c) || c.is_alphanumeric() || c == '\u{200c}' || c == '\u{200d}'
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        self.text[self.pos..].chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn eat(&mut self, prefix: &str) -> bool {
        let found = self.text[self.pos..].starts_with(prefix);
        if found {
            self.pos += prefix.len();
        }
        found
    }

    fn fail(&self, message: &str) -> Failure {
        (self.pos, message.to_owned())
    }

    /// A failure at the current character: unexpected it (or the end), and what was expected.
    fn unexpected(&self, expected: &str) -> Failure {
        match self.peek() {
            Some(c) => self.fail(&format!("unexpected {}: {expected}", show(c))),
            None => self.fail(&format!("unexpected end of the payload: {expected}")),
        }
    }

    /// Whitespace, `// line` and `/* block */` comments.
    fn skip_trivia(&mut self) -> Result<(), Failure> {
        loop {
            while self.peek().is_some_and(is_js_space) {
                self.bump();
            }
            if self.eat("//") {
                self.pos = self.text.len();
            } else if self.text[self.pos..].starts_with("/*") {
                let start = self.pos;
                let end =
                    self.text[start + 2..].find("*/").ok_or((start, "unterminated comment".to_owned()))?;
                self.pos = start + 2 + end + 2;
            } else {
                return Ok(());
            }
        }
    }

    fn value(&mut self) -> Result<Value, Failure> {
        match self.peek() {
            Some('{') => self.object().map(Value::Object),
            Some('[') => self.array(),
            Some(q @ ('"' | '\'')) => self.string(q).map(Value::String),
            Some(c) if c.is_ascii_digit() || matches!(c, '+' | '-' | '.') => self.number(),
            Some(c) if is_identifier_start(c) || c == '\\' => {
                let start = self.pos;
                match self.identifier()?.as_str() {
                    "null" => Ok(Value::Null),
                    "true" => Ok(Value::Bool(true)),
                    "false" => Ok(Value::Bool(false)),
                    "Infinity" | "NaN" => Ok(Value::Null),
                    word => Err((start, format!("unexpected '{word}': expected a value"))),
                }
            }
            _ => Err(self.unexpected("expected a value")),
        }
    }

    fn enter(&mut self) -> Result<(), Failure> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.fail(&format!("the payload nests deeper than {MAX_DEPTH} levels")));
        }
        self.bump();
        Ok(())
    }

    fn object(&mut self) -> Result<Map<String, Value>, Failure> {
        self.enter()?;
        let mut map = Map::new();
        loop {
            self.skip_trivia()?;
            if self.eat("}") {
                break;
            }
            let key = match self.peek() {
                Some(q @ ('"' | '\'')) => self.string(q)?,
                Some(c) if is_identifier_start(c) || c == '\\' => self.identifier()?,
                _ => return Err(self.unexpected("expected a property name or '}'")),
            };
            self.skip_trivia()?;
            if !self.eat(":") {
                return Err(self.unexpected("expected ':' after the property name"));
            }
            self.skip_trivia()?;
            let value = self.value()?;
            map.insert(key, value);
            self.skip_trivia()?;
            if self.eat("}") {
                break;
            }
            if !self.eat(",") {
                return Err(self.unexpected("expected ',' or '}'"));
            }
        }
        self.depth -= 1;
        Ok(map)
    }

    fn array(&mut self) -> Result<Value, Failure> {
        self.enter()?;
        let mut items = Vec::new();
        loop {
            self.skip_trivia()?;
            if self.eat("]") {
                break;
            }
            items.push(self.value()?);
            self.skip_trivia()?;
            if self.eat("]") {
                break;
            }
            if !self.eat(",") {
                return Err(self.unexpected("expected ',' or ']'"));
            }
        }
        self.depth -= 1;
        Ok(Value::Array(items))
    }

    /// An identifier name (unquoted key or literal), `\uXXXX` escapes included.
    fn identifier(&mut self) -> Result<String, Failure> {
        let mut name = String::new();
        loop {
            let at = self.pos;
            let c = match self.peek() {
                Some('\\') => {
                    self.bump();
                    if !self.eat("u") {
                        return Err(self.unexpected("expected 'u' of a \\uXXXX escape in a name"));
                    }
                    char::from_u32(u32::from(self.hex(4)?)).unwrap_or('\u{fffd}')
                }
                Some(c) if is_identifier_part(c) => {
                    self.bump();
                    c
                }
                _ => break,
            };
            let fits = if name.is_empty() { is_identifier_start(c) } else { is_identifier_part(c) };
            if !fits {
                return Err((at, format!("{} may not appear in a property name", show(c))));
            }
            name.push(c);
        }
        Ok(name)
    }

    /// `count` hex digits as a number (count is 2 or 4).
    fn hex(&mut self, count: usize) -> Result<u16, Failure> {
        let mut value = 0u16;
        for _ in 0..count {
            let digit = self.peek().and_then(|c| c.to_digit(16));
            let Some(digit) = digit else { return Err(self.unexpected("expected a hexadecimal digit")) };
            self.bump();
            value = value * 16 + digit as u16;
        }
        Ok(value)
    }

    fn string(&mut self, quote: char) -> Result<String, Failure> {
        let start = self.pos;
        self.bump();
        let mut text = String::new();
        loop {
            match self.bump() {
                None => return Err((start, "unterminated string".to_owned())),
                Some(c) if c == quote => return Ok(text),
                Some('\\') => text.push(self.escape()?),
                Some(c) => text.push(c),
            }
        }
    }

    /// The character escaped after a backslash in a string.
    fn escape(&mut self) -> Result<char, Failure> {
        let at = self.pos;
        let Some(c) = self.bump() else { return Err((at, "unterminated string".to_owned())) };
        Ok(match c {
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            '0' if self.peek().is_some_and(|d| d.is_ascii_digit()) => {
                return Err((at, "octal escapes are not allowed".to_owned()))
            }
            '0' => '\0',
            '1'..='9' => return Err((at, "octal escapes are not allowed".to_owned())),
            'x' => char::from(self.hex(2)? as u8),
            'u' => self.unicode_escape()?,
            other => other,
        })
    }

    /// After `\u`: a code unit, joined with a following `\uDC00`-`\uDFFF` escape when it is
    /// a high surrogate; an unpaired surrogate becomes U+FFFD.
    fn unicode_escape(&mut self) -> Result<char, Failure> {
        let unit = u32::from(self.hex(4)?);
        if (0xd800..0xdc00).contains(&unit) && self.text[self.pos..].starts_with("\\u") {
            let saved = self.pos;
            self.pos += 2;
            let low = u32::from(self.hex(4)?);
            if (0xdc00..0xe000).contains(&low) {
                return Ok(
                    char::from_u32(0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00)).unwrap_or('\u{fffd}')
                );
            }
            self.pos = saved;
        }
        Ok(char::from_u32(unit).unwrap_or('\u{fffd}'))
    }

    /// A JSON5 number: sign, then `Infinity`, `NaN`, hexadecimal, or decimal with optional
    /// leading or trailing point and exponent.
    fn number(&mut self) -> Result<Value, Failure> {
        let negative = match self.peek() {
            Some('-') => {
                self.bump();
                true
            }
            Some('+') => {
                self.bump();
                false
            }
            _ => false,
        };
        let magnitude = if self.eat("Infinity") {
            f64::INFINITY
        } else if self.eat("NaN") {
            f64::NAN
        } else if self.peek() == Some('0') && matches!(self.peek_second(), Some('x' | 'X')) {
            self.pos += 2;
            self.hex_number()?
        } else {
            self.decimal()?
        };
        if self.peek().is_some_and(|c| is_identifier_start(c) || c.is_ascii_digit()) {
            return Err(self.unexpected("expected the number to end"));
        }
        Ok(js_number(if negative { -magnitude } else { magnitude }))
    }

    fn hex_number(&mut self) -> Result<f64, Failure> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
            self.bump();
        }
        let digits = &self.text[start..self.pos];
        if digits.is_empty() {
            return Err(self.unexpected("expected a hexadecimal digit"));
        }
        Ok(u64::from_str_radix(digits, 16).map(|n| n as f64).unwrap_or_else(|_| {
            digits.chars().filter_map(|c| c.to_digit(16)).fold(0.0, |n, d| n * 16.0 + f64::from(d))
        }))
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        self.pos - start
    }

    fn decimal(&mut self) -> Result<f64, Failure> {
        let start = self.pos;
        if self.peek() == Some('0') && self.peek_second().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
            return Err(self.fail("a number may not have leading zeros"));
        }
        let mut count = self.digits();
        if self.eat(".") {
            count += self.digits();
        }
        if count == 0 {
            self.pos = start;
            return Err(self.unexpected("expected a number"));
        }
        if self.eat("e") || self.eat("E") {
            if !self.eat("+") {
                self.eat("-");
            }
            if self.digits() == 0 {
                return Err(self.unexpected("expected the digits of an exponent"));
            }
        }
        self.text[start..self.pos].parse::<f64>().map_err(|_| (start, "invalid number".to_owned()))
    }
}
