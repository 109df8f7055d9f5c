//! The wire format, as far as the server needs it: the question of a query message, names and
//! records written uncompressed, and a reply cut to what the transport carries.

/// Query type A.
pub const A: u16 = 1;
/// Query type CNAME.
pub const CNAME: u16 = 5;
/// Query type AAAA.
pub const AAAA: u16 = 28;

/// Response code NXDOMAIN.
pub const NXDOMAIN: u8 = 3;

/// The question of a query message, with what the reply must echo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Question {
    pub(super) id: u16,
    pub(super) rd: bool,
    pub(super) name: String,
    pub(super) qtype: u16,
    pub(super) qclass: u16,
    /// Where the question section ends in the message.
    pub(super) end: usize,
    /// The UDP payload size of the query's EDNS0 OPT record (0 without one).
    pub(super) udp_payload: usize,
}

pub(super) fn parse_question(msg: &[u8]) -> Option<Question> {
    let header = msg.get(..12)?;
    let is_query = header[2] & 0x80 == 0;
    let qdcount = u16::from_be_bytes([header[4], header[5]]);
    if !is_query || qdcount != 1 {
        return None;
    }
    let (name, mut pos) = read_name(msg, 12)?;
    let fixed = msg.get(pos..pos + 4)?;
    let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let qclass = u16::from_be_bytes([fixed[2], fixed[3]]);
    pos += 4;
    let arcount = u16::from_be_bytes([header[10], header[11]]);
    Some(Question {
        id: u16::from_be_bytes([header[0], header[1]]),
        rd: header[2] & 0x01 != 0,
        name,
        qtype,
        qclass,
        end: pos,
        udp_payload: if arcount > 0 {
            opt_payload(msg, pos)
        } else {
            0
        },
    })
}

/// The payload size of an OPT record (root name, type 41) starting at `pos`; 0 otherwise.
fn opt_payload(msg: &[u8], pos: usize) -> usize {
    match msg.get(pos..pos + 5) {
        Some([0, 0, 41, high, low]) => usize::from(u16::from_be_bytes([*high, *low])),
        _ => 0,
    }
}

/// Reads an uncompressed name (a question never needs compression) at `pos`; the name,
/// lower-cased without the trailing dot, and the position after it.
fn read_name(msg: &[u8], mut pos: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = usize::from(*msg.get(pos)?);
        pos += 1;
        if len == 0 {
            return Some((labels.join("."), pos));
        }
        if len > 63 {
            return None; // a compression pointer or a reserved label type
        }
        let label = msg.get(pos..pos + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        pos += len;
    }
}

pub(super) fn write_name(out: &mut Vec<u8>, name: &str) {
    for label in name.split('.').filter(|l| !l.is_empty()) {
        let bytes = &label.as_bytes()[..label.len().min(63)];
        out.push(u8::try_from(bytes.len()).expect("a label is at most 63 bytes"));
        out.extend_from_slice(bytes);
    }
    out.push(0);
}

pub(super) fn write_record(out: &mut Vec<u8>, name: &str, rtype: u16, ttl: u32, data: &[u8]) {
    write_name(out, name);
    out.extend(rtype.to_be_bytes());
    out.extend(1u16.to_be_bytes()); // class IN
    out.extend(ttl.to_be_bytes());
    out.extend(
        u16::try_from(data.len())
            .expect("short record data")
            .to_be_bytes(),
    );
    out.extend_from_slice(data);
}

/// The reply to `question` (from message `query`) holding `records`, each one whole, at most
/// `limit` bytes long: the records that fit, and the TC bit when they do not all fit.
pub(super) fn reply(
    question: &Question,
    query: &[u8],
    records: &[Vec<u8>],
    rcode: u8,
    limit: usize,
) -> Vec<u8> {
    let mut fit = 0;
    let mut size = question.end;
    for record in records {
        if size + record.len() > limit {
            break;
        }
        size += record.len();
        fit += 1;
    }
    let truncated = fit < records.len();
    let mut out = Vec::with_capacity(size);
    out.extend(question.id.to_be_bytes());
    // QR, opcode 0, TC when truncated, RD echoed; RA; the response code.
    out.push(0x80 | if truncated { 0x02 } else { 0 } | u8::from(question.rd));
    out.push(0x80 | rcode);
    out.extend(1u16.to_be_bytes()); // one question
    out.extend(u16::try_from(fit).unwrap_or(u16::MAX).to_be_bytes());
    out.extend([0, 0, 0, 0]); // no authority, no additional records
    out.extend_from_slice(&query[12..question.end]);
    for record in &records[..fit] {
        out.extend_from_slice(record);
    }
    out
}
