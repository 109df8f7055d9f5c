//! Which machine a binary is for, from its ELF header.
//!
//! The stack pins the architecture it publishes (the apply document refuses to run the agent on
//! an instance whose `uname -m` differs), so the publisher must say what the layer really holds
//! rather than trust a build setting: a layer built for the wrong machine, or a file that is not
//! a Linux executable at all, fails the deploy here, before any instance downloads it. Only the
//! first 20 bytes are read; nothing here needs an ELF crate.

use std::fmt;

/// The machines an autoproxy-agent is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Machine {
    X86_64,
    Aarch64,
}

impl Machine {
    /// As `uname -m` prints it on the instance: what the apply document compares.
    pub fn uname(self) -> &'static str {
        match self {
            Machine::X86_64 => "x86_64",
            Machine::Aarch64 => "aarch64",
        }
    }
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.uname())
    }
}

/// What the header says instead of a 64-bit little-endian x86_64 or aarch64 executable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    #[error("expected an ELF executable, got {len} bytes (an ELF header has 20 at least)")]
    TooShort { len: usize },
    #[error("expected an ELF executable (starting 7f 45 4c 46), got a file starting {start}")]
    NotElf { start: String },
    #[error("expected a 64-bit ELF executable, got ELF class {class} (1 is 32-bit)")]
    NotElf64 { class: u8 },
    #[error(
        "expected a little-endian ELF executable, got ELF data encoding {data} (2 is big-endian)"
    )]
    NotLittleEndian { data: u8 },
    #[error(
        "expected an ELF executable (e_type 2, or 3 for a position-independent one), got e_type {e_type}"
    )]
    NotExecutable { e_type: u16 },
    #[error("expected an x86_64 or aarch64 executable, got e_machine {e_machine} ({name})")]
    UnsupportedMachine { e_machine: u16, name: &'static str },
}

/// `e_machine` values (ELF specification) for the machines this refuses by name.
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

fn machine_name(e_machine: u16) -> &'static str {
    match e_machine {
        3 => "i386",
        8 => "MIPS",
        20 => "PowerPC",
        21 => "PowerPC 64",
        22 => "s390",
        40 => "32-bit ARM",
        243 => "RISC-V",
        258 => "LoongArch",
        _ => "unknown",
    }
}

/// The machine `header` (the start of a file) is an executable for.
pub fn machine(header: &[u8]) -> Result<Machine, ElfError> {
    let Some(fixed) = header.get(..20) else {
        return Err(ElfError::TooShort { len: header.len() });
    };
    if fixed[..4] != *b"\x7fELF" {
        let start = fixed[..4]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<Vec<_>>()
            .join(" ");
        return Err(ElfError::NotElf { start });
    }
    match fixed[4] {
        2 => {}
        class => return Err(ElfError::NotElf64 { class }),
    }
    match fixed[5] {
        1 => {}
        data => return Err(ElfError::NotLittleEndian { data }),
    }
    let e_type = u16::from_le_bytes([fixed[16], fixed[17]]);
    if !matches!(e_type, 2 | 3) {
        return Err(ElfError::NotExecutable { e_type });
    }
    match u16::from_le_bytes([fixed[18], fixed[19]]) {
        EM_X86_64 => Ok(Machine::X86_64),
        EM_AARCH64 => Ok(Machine::Aarch64),
        e_machine => Err(ElfError::UnsupportedMachine {
            e_machine,
            name: machine_name(e_machine),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-byte ELF header: 64-bit, little-endian, of `e_type` for `e_machine`.
    fn header(class: u8, data: u8, e_type: u16, e_machine: u16) -> Vec<u8> {
        let mut bytes = vec![0u8; 64];
        bytes[..4].copy_from_slice(b"\x7fELF");
        bytes[4] = class;
        bytes[5] = data;
        bytes[6] = 1;
        bytes[16..18].copy_from_slice(&e_type.to_le_bytes());
        bytes[18..20].copy_from_slice(&e_machine.to_le_bytes());
        bytes
    }

    fn check(bytes: &[u8], expected: Result<Machine, &str>) {
        let got = machine(bytes).map_err(|err| err.to_string());
        match (&got, &expected) {
            (Ok(got), Ok(expected)) => assert_eq!(got, expected),
            (Err(got), Err(expected)) => assert!(got.contains(expected), "{got:?} vs {expected:?}"),
            _ => panic!("{got:?} vs {expected:?}"),
        }
    }

    #[test]
    fn reads_the_machine_or_says_what_arrived() {
        check(&header(2, 1, 2, 62), Ok(Machine::X86_64));
        check(&header(2, 1, 3, 62), Ok(Machine::X86_64));
        check(&header(2, 1, 3, 183), Ok(Machine::Aarch64));
        check(&header(2, 1, 3, 40), Err("got e_machine 40 (32-bit ARM)"));
        check(&header(2, 1, 3, 243), Err("got e_machine 243 (RISC-V)"));
        check(&header(2, 1, 3, 9999), Err("got e_machine 9999 (unknown)"));
        check(&header(1, 1, 3, 3), Err("got ELF class 1"));
        check(&header(2, 2, 3, 62), Err("got ELF data encoding 2"));
        check(&header(2, 1, 1, 62), Err("got e_type 1"));
        check(
            b"#!/bin/sh\necho hello world\n",
            Err("starting 23 21 2f 62"),
        );
        check(b"\x7fELF", Err("got 4 bytes"));
        check(b"", Err("got 0 bytes"));
    }

    #[test]
    fn names_the_machine_as_uname_does() {
        assert_eq!(Machine::X86_64.uname(), "x86_64");
        assert_eq!(Machine::Aarch64.to_string(), "aarch64");
    }
}
