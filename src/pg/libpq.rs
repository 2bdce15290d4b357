//! One libpq connection, driven asynchronously so that a server that stops answering (a
//! partition, a stopped host) costs its caller a deadline, never a hang: the lease worker's to
//! the registry (`registry_client`), and a backend's to another node of its Citus cluster
//! (`citus_peers`). Knows no SQL of either; its errors name the far side as the caller calls it
//! ("the registry", "node 10.0.0.2:5432"). A multi-host string's hosts are tried one by one, each
//! with its own connect deadline (`idgen_core::hosts`).

use idgen_core::hosts;
use pq_sys as pq;
use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr;
use std::time::{Duration, Instant};

/// Why a connection or a call failed, in words for a log or an error's detail.
#[derive(Debug)]
pub enum Failure {
    /// libpq's or the far side's words; not worth a retry on the same connection.
    Broken(String),
    /// An error the far side answered: its SQLSTATE and message.
    Refused { sqlstate: String, message: String },
}

impl Failure {
    pub fn text(&self) -> String {
        match self {
            Failure::Broken(why) => why.clone(),
            Failure::Refused { sqlstate, message } => format!("{message} (SQLSTATE {sqlstate})"),
        }
    }
}

/// The keyword/value pairs of a libpq connection string, as libpq parses it; libpq's words
/// where it cannot.
pub fn parse_conninfo(conninfo: &str) -> Result<Vec<(String, String)>, String> {
    let text = CString::new(conninfo).map_err(|_| "it contains a NUL byte".to_string())?;
    let mut errmsg: *mut c_char = ptr::null_mut();
    let options = unsafe { pq::PQconninfoParse(text.as_ptr(), &mut errmsg) };
    if options.is_null() {
        let why = if errmsg.is_null() {
            "libpq could not parse it (out of memory?)".to_string()
        } else {
            let why = unsafe { CStr::from_ptr(errmsg) }
                .to_string_lossy()
                .trim()
                .to_string();
            unsafe { pq::PQfreemem(errmsg.cast()) };
            why
        };
        return Err(why);
    }
    let mut pairs = Vec::new();
    let mut at = options;
    unsafe {
        while !(*at).keyword.is_null() {
            if !(*at).val.is_null() {
                pairs.push((
                    CStr::from_ptr((*at).keyword).to_string_lossy().into_owned(),
                    CStr::from_ptr((*at).val).to_string_lossy().into_owned(),
                ));
            }
            at = at.add(1);
        }
        pq::PQconninfoFree(options);
    }
    Ok(pairs)
}

/// An open connection (or none yet). `peer` names the far side in every message.
pub struct Conn {
    peer: String,
    conn: *mut pq::PGconn,
}

impl Conn {
    pub fn new(peer: impl Into<String>) -> Self {
        Conn {
            peer: peer.into(),
            conn: ptr::null_mut(),
        }
    }

    pub fn is_open(&self) -> bool {
        !self.conn.is_null()
            && unsafe { pq::PQstatus(self.conn) } == pq::ConnStatusType::CONNECTION_OK
    }

    pub fn close(&mut self) {
        if !self.conn.is_null() {
            unsafe { pq::PQfinish(self.conn) };
            self.conn = ptr::null_mut();
        }
    }

    fn error_message(&self) -> String {
        if self.conn.is_null() {
            return "out of memory".into();
        }
        let text = unsafe { CStr::from_ptr(pq::PQerrorMessage(self.conn)) };
        text.to_string_lossy().trim().replace('\n', " ")
    }

    /// Opens the connection from keyword/value pairs (libpq's `PQconnectStartParams`, with a
    /// value of `dbname` expanded as a connection string when `expand_dbname`, its pairs then
    /// overriding those before it); `stop()` is polled every 100 ms. A connection already open is
    /// kept. Each host of a multi-host string is tried in turn with a deadline of its own, as
    /// libpq's `connect_timeout` gives it (`within` where that is unset), so that a host that never
    /// answers costs one deadline and the next host is still reached.
    pub fn open(
        &mut self,
        pairs: &[(&CStr, &CStr)],
        expand_dbname: bool,
        within: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), Failure> {
        if self.is_open() {
            return Ok(());
        }
        self.close();
        self.start(pairs, expand_dbname)?;
        // The options as libpq reads them, the connection string expanded.
        let options = self.options();
        let value = |key: &str| {
            options
                .iter()
                .find(|(k, _)| k.as_bytes() == key.as_bytes())
                .map(|(_, v)| v.to_str().unwrap_or_default())
        };
        let each =
            hosts::connect_timeout_s(value("connect_timeout")).map_or(within, Duration::from_secs);
        let Some(list) = hosts::split(value("host"), value("hostaddr"), value("port")) else {
            return self.finish_connecting(each, stop);
        };
        self.close();
        let mut why = Vec::new();
        for target in &list {
            let one: Vec<(&CStr, &CStr)> = options
                .iter()
                .filter(|(k, _)| !matches!(k.to_bytes(), b"host" | b"hostaddr" | b"port"))
                .map(|(k, v)| (k.as_c_str(), v.as_c_str()))
                .collect();
            let entries = [
                ("host", &target.host),
                ("hostaddr", &target.hostaddr),
                ("port", &target.port),
            ];
            let owned: Vec<(CString, CString)> = entries
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| {
                    (
                        CString::new(*k).unwrap_or_default(),
                        CString::new(v.as_str()).unwrap_or_default(),
                    )
                })
                .collect();
            let mut pairs = one;
            pairs.extend(owned.iter().map(|(k, v)| (k.as_c_str(), v.as_c_str())));
            let name = if target.host.is_empty() {
                &target.hostaddr
            } else {
                &target.host
            };
            let attempt = self
                .start(&pairs, false)
                .and_then(|()| self.finish_connecting(each, stop));
            match attempt {
                Ok(()) => return Ok(()),
                Err(f) => {
                    if stop() {
                        return Err(f);
                    }
                    why.push(format!("host {name} port {}: {}", target.port, f.text()));
                }
            }
        }
        Err(Failure::Broken(format!(
            "could not connect to {} on any of its {} hosts: {}",
            self.peer,
            list.len(),
            why.join("; ")
        )))
    }

    /// Starts connecting (`PQconnectStartParams`).
    fn start(&mut self, pairs: &[(&CStr, &CStr)], expand_dbname: bool) -> Result<(), Failure> {
        let mut keywords: Vec<*const c_char> = pairs.iter().map(|(k, _)| k.as_ptr()).collect();
        let mut values: Vec<*const c_char> = pairs.iter().map(|(_, v)| v.as_ptr()).collect();
        keywords.push(ptr::null());
        values.push(ptr::null());
        self.conn = unsafe {
            pq::PQconnectStartParams(
                keywords.as_ptr(),
                values.as_ptr(),
                c_int::from(expand_dbname),
            )
        };
        if self.conn.is_null()
            || unsafe { pq::PQstatus(self.conn) } == pq::ConnStatusType::CONNECTION_BAD
        {
            let failure = self.cannot();
            self.close();
            return Err(failure);
        }
        Ok(())
    }

    /// The options of the connection being made, as libpq holds them (`PQconninfo`).
    fn options(&self) -> Vec<(CString, CString)> {
        let mut out = Vec::new();
        let options = unsafe { pq::PQconninfo(self.conn) };
        if options.is_null() {
            return out;
        }
        let mut at = options;
        unsafe {
            while !(*at).keyword.is_null() {
                if !(*at).val.is_null() {
                    out.push((
                        CStr::from_ptr((*at).keyword).to_owned(),
                        CStr::from_ptr((*at).val).to_owned(),
                    ));
                }
                at = at.add(1);
            }
            pq::PQconninfoFree(options);
        }
        out
    }

    fn cannot(&self) -> Failure {
        Failure::Broken(format!(
            "could not connect to {}: {}",
            self.peer,
            self.error_message()
        ))
    }

    /// Drives the connection started until it is made, within `within`.
    fn finish_connecting(
        &mut self,
        within: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), Failure> {
        let deadline = Instant::now() + within;
        let mut want_write = true;
        loop {
            if unsafe { pq::PQstatus(self.conn) } == pq::ConnStatusType::CONNECTION_BAD {
                let failure = self.cannot();
                self.close();
                return Err(failure);
            }
            if let Err(f) = self.wait_socket(want_write, deadline, within, stop) {
                self.close();
                return Err(f);
            }
            match unsafe { pq::PQconnectPoll(self.conn) } {
                pq::PostgresPollingStatusType::PGRES_POLLING_OK => return Ok(()),
                pq::PostgresPollingStatusType::PGRES_POLLING_FAILED => {
                    let failure = self.cannot();
                    self.close();
                    return Err(failure);
                }
                pq::PostgresPollingStatusType::PGRES_POLLING_READING => want_write = false,
                _ => want_write = true,
            }
        }
    }

    /// Waits until the socket is ready (or the deadline passes, or `stop()`), in slices of
    /// 100 ms; `within` is the deadline's length, for the message.
    fn wait_socket(
        &self,
        write: bool,
        deadline: Instant,
        within: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), Failure> {
        let fd = unsafe { pq::PQsocket(self.conn) };
        if fd < 0 {
            return Err(Failure::Broken(format!(
                "could not connect to {}: {}",
                self.peer,
                self.error_message()
            )));
        }
        loop {
            if stop() {
                return Err(Failure::Broken("the server is shutting down".into()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Failure::Broken(format!(
                    "{} did not answer within {} s",
                    self.peer,
                    within.as_secs()
                )));
            }
            let mut pfd = libc::pollfd {
                fd,
                events: if write { libc::POLLOUT } else { libc::POLLIN },
                revents: 0,
            };
            let slice = left.min(Duration::from_millis(100)).as_millis() as c_int;
            if unsafe { libc::poll(&mut pfd, 1, slice) } > 0 {
                return Ok(());
            }
        }
    }

    /// Sends `sql` with `params` (None: SQL NULL) on the open connection and reads each result
    /// with `read`, only once libpq has it whole, so that no call blocks past `within`. The
    /// first error wins, and an error after the rows (at commit) makes the call a failure.
    pub fn call<T>(
        &mut self,
        sql: &CStr,
        params: &[Option<String>],
        within: Duration,
        stop: &dyn Fn() -> bool,
        read: impl Fn(&Rows) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let params: Vec<Option<CString>> = params
            .iter()
            .map(|p| {
                p.as_ref()
                    .map(|v| CString::new(v.as_str()).unwrap_or_default())
            })
            .collect();
        let values: Vec<*const c_char> = params
            .iter()
            .map(|p| p.as_ref().map_or(ptr::null(), |v| v.as_ptr()))
            .collect();
        let sent = unsafe {
            pq::PQsendQueryParams(
                self.conn,
                sql.as_ptr(),
                values.len() as c_int,
                ptr::null(),
                values.as_ptr(),
                ptr::null(),
                ptr::null(),
                0,
            )
        };
        if sent == 0 {
            return Err(Failure::Broken(format!(
                "could not send a call to {}: {}",
                self.peer,
                self.error_message()
            )));
        }
        let deadline = Instant::now() + within;
        let mut answer: Option<Result<T, Failure>> = None;
        loop {
            if unsafe { pq::PQconsumeInput(self.conn) } == 0 {
                return Err(Failure::Broken(format!(
                    "lost the connection to {}: {}",
                    self.peer,
                    self.error_message()
                )));
            }
            if unsafe { pq::PQisBusy(self.conn) } != 0 {
                self.wait_socket(false, deadline, within, stop)?;
                continue;
            }
            let res = unsafe { pq::PQgetResult(self.conn) };
            if res.is_null() {
                break;
            }
            let rows = Rows(res);
            let this = if rows.ok() {
                read(&rows)
            } else {
                Err(rows.failure())
            };
            drop(rows);
            answer = match (answer, this) {
                (None, this) => Some(this),
                (Some(Ok(_)), Err(e)) => Some(Err(e)),
                (kept, _) => kept,
            };
        }
        answer.unwrap_or_else(|| Err(Failure::Broken(format!("{} sent no result", self.peer))))
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.close();
    }
}

/// One result of a call, read by column name.
pub struct Rows(*mut pq::PGresult);

impl Rows {
    fn ok(&self) -> bool {
        matches!(
            unsafe { pq::PQresultStatus(self.0) },
            pq::ExecStatusType::PGRES_TUPLES_OK | pq::ExecStatusType::PGRES_COMMAND_OK
        )
    }

    fn failure(&self) -> Failure {
        let field = |code: u8| unsafe {
            let p = pq::PQresultErrorField(self.0, c_int::from(code));
            (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        };
        Failure::Refused {
            sqlstate: field(b'C').unwrap_or_default(),
            message: field(b'M').unwrap_or_else(|| "unknown error".into()),
        }
    }

    pub fn count(&self) -> usize {
        unsafe { pq::PQntuples(self.0) }.max(0) as usize
    }

    /// The column's number, or None where the answer has no column of that name.
    pub fn column(&self, name: &CStr) -> Option<c_int> {
        let at = unsafe { pq::PQfnumber(self.0, name.as_ptr()) };
        (at >= 0).then_some(at)
    }

    /// Row `row`'s value in column `col` as text; None for SQL NULL.
    pub fn text(&self, row: usize, col: c_int) -> Option<String> {
        let row = row as c_int;
        unsafe {
            if pq::PQgetisnull(self.0, row, col) != 0 {
                None
            } else {
                Some(
                    CStr::from_ptr(pq::PQgetvalue(self.0, row, col))
                        .to_string_lossy()
                        .into_owned(),
                )
            }
        }
    }
}

impl Drop for Rows {
    fn drop(&mut self) {
        unsafe { pq::PQclear(self.0) };
    }
}
