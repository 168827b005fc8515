/* fleetwatch: an open page keeps refreshing across a dashboard restart (see live.py). */
(function () {
  "use strict";
  // lost: input id -> when a request with that input got no answer; down: since when the
  // dashboard does not answer (null while it does), and how.
  // pending: request number -> when it was sent, while it waits for its answer.
  // answered: input id -> when a request with that input was last answered (the page's own
  // refresh: its tick's id); opened: tick id -> when that page was drawn; check: the last
  // freshness check that read the store (fresh.py), and when it came.
  const live = {lost: {}, okAt: null, downSince: null, why: "", shown: {}, pending: {}, n: 0,
                answered: {}, opened: {}, check: null, checkAt: null, checkError: "",
                staleShown: {}};
  const send = window.fetch.bind(window);

  function inputIds(init) {
    try {
      return JSON.parse(init.body).inputs.map(i => i.id).filter(id => typeof id === "string");
    } catch (e) {
      return [];
    }
  }

  function down(why) {
    if (live.downSince === null) live.downSince = Date.now();
    live.why = why;
  }

  window.fetch = function (input, init) {
    const url = typeof input === "string" ? input : (input && input.url) || "";
    const answer = send(input, init);
    if (url.indexOf("_dash-update-component") < 0) return answer;
    const n = ++live.n;
    live.pending[n] = Date.now();
    return answer.then(res => {
      delete live.pending[n];
      if (res.status < 400) {  // 204 is Dash's "nothing to update"
        live.okAt = Date.now();
        live.downSince = null;
        inputIds(init || {}).forEach(id => { live.answered[id] = live.okAt; });
      } else {  // Dash ends the request itself: the tick is re-armed, only the banner is ours
        down("it answered HTTP " + res.status);
      }
      return res;
    }, err => {
      delete live.pending[n];
      const at = Date.now();
      inputIds(init || {}).forEach(id => { live.lost[id] = at; });
      down("no answer");
      throw err;
    });
  };

  function utc(ms) {
    return new Date(ms).toISOString().slice(11, 19) + " UTC";
  }

  // A server that hangs (stopped, or stuck on its store) answers nothing and fails nothing:
  // a request waiting longer than this is the dashboard not answering too.
  function waiting(everyMs) {
    const sent = Object.values(live.pending);
    if (!sent.length) return null;
    const oldest = Math.min.apply(null, sent);
    return Date.now() - oldest > Math.max(10000, 5 * everyMs) ? oldest : null;
  }

  function banner(everyMs) {
    const hung = live.downSince === null ? waiting(everyMs) : null;
    if (hung !== null) {
      live.downSince = hung;
      live.why = "a request has waited since then: the dashboard or its store is hung or " +
        "very slow";
    }
    const still = waiting(everyMs) !== null;
    if (live.downSince === null) return "";
    const secs = Math.round((Date.now() - live.downSince) / 1000);
    const last = live.okAt === null ? "no answer since the page was opened"
      : "last answer at " + utc(live.okAt);
    return "Dashboard not answering since " + utc(live.downSince) + " (" + secs + " s, " +
      live.why + "): this page is as of its " + last + ", not now. " +
      (still ? "Waiting for that answer." :
        "Retrying every " + Math.max(1, Math.round(everyMs / 1000)) + " s.");
  }

  function ago(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 120) return s + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  // The stale-data banner (fresh.py), pure: now, the last check that read the store and
  // when it came (browser clock), when the page's own refresh last answered (browser
  // clock), and its interval. Ages are taken within one clock each, never across the two.
  // Returns null (no banner) or {text, cls}.
  function stale(now, check, checkAt, pageAt, everyMs, checkError) {
    if (!check || checkAt === null) return null;  // no check yet: the "not answering" banner
    if (check.newest_ms === null || check.newest_ms === undefined) {
      return {text: "Waiting for the first data: the store held no sample when the dashboard " +
        "last looked, at " + utc(check.read_ms) + ". This page fills in once the collectors " +
        "send theirs.", cls: "notice stale waiting"};
    }
    const limit = check.stale_ms;
    const collectors = Math.max(0, check.read_ms - check.newest_ms);
    const behindAt = Math.min(checkAt, pageAt);
    const page = Math.max(0, now - behindAt);
    const age = collectors + page;
    if (age <= limit) return null;
    const parts = ["Stale data: the newest sample this page can show is about " + ago(age) +
      " old (" + utc(check.newest_ms) + "); it refreshes every " +
      Math.max(1, Math.round(everyMs / 1000)) + " s."];
    if (collectors > limit / 2) {
      parts.push("The collectors are behind: the store's newest sample was " + ago(collectors) +
        " old when the dashboard read it at " + utc(check.read_ms) + " (agents, bus or " +
        "processor stopped or slow).");
    }
    if (page > limit / 2) {
      const what = checkAt < pageAt ? "the dashboard last read the store" : "this page last refreshed";
      parts.push("The page is behind: " + what + " at " + utc(behindAt) +
        " (this browser's clock), " + ago(page) + " ago (the dashboard or its store is slow" +
        (checkError ? ": " + checkError : "") + ").");
    }
    return {text: parts.join(" "), cls: "notice stale"};
  }

  window.dash_clientside = window.dash_clientside || {};
  window.dash_clientside.fleetwatch = {
    stale: stale,
    // The page's watch: [its tick's "disabled", the banner's text, the banner hidden, the
    // freshness check's tick "disabled", the stale banner's text, hidden, class].
    watch: function (n, tick, everyMs, check, checkTick) {
      const keep = window.dash_clientside.no_update;
      const now = Date.now();
      let rearm = keep, rearmCheck = keep;
      if (live.lost[tick] !== undefined) {  // Dash will never end that request: we do
        delete live.lost[tick];
        rearm = false;
      }
      if (live.lost[checkTick] !== undefined) {
        delete live.lost[checkTick];
        rearmCheck = false;
      }
      if (n <= 1) {  // the page was just drawn: its refresh is on its way
        live.opened[tick] = now;
        delete live.staleShown[tick];
      }
      if (check && (live.check === null || check.read_ms !== live.check.read_ms)) {
        if (check.error === undefined) {  // a check that read nothing keeps the last one's
          live.check = check;
          live.checkAt = live.answered[checkTick] || now;
          live.checkError = "";
        } else {
          live.checkError = check.error;
        }
      }
      const pageAt = Math.max(live.answered[tick] || 0, live.opened[tick] || now);
      const found = stale(now, live.check, live.checkAt, pageAt, everyMs, live.checkError);
      const staleOut = found ? [found.text, false, found.cls] : ["", true, "notice stale"];
      if (JSON.stringify(staleOut) === live.staleShown[tick]) {
        staleOut[0] = staleOut[1] = staleOut[2] = keep;
      } else {
        live.staleShown[tick] = JSON.stringify(staleOut);
      }
      const text = banner(everyMs);
      if (text === live.shown[tick]) return [rearm, keep, keep, rearmCheck].concat(staleOut);
      live.shown[tick] = text;
      return [rearm, text, !text, rearmCheck].concat(staleOut);
    },
  };
})();
