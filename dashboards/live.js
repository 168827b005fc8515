/* fleetwatch: an open page keeps refreshing across a dashboard restart (see live.py). */
(function () {
  "use strict";
  // lost: input id -> when a request with that input got no answer; down: since when the
  // dashboard does not answer (null while it does), and how.
  // pending: request number -> when it was sent, while it waits for its answer.
  const live = {lost: {}, okAt: null, downSince: null, why: "", shown: {}, pending: {}, n: 0};
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

  window.dash_clientside = window.dash_clientside || {};
  window.dash_clientside.fleetwatch = {
    // The page's watch: [its tick's "disabled", the banner's text, the banner hidden].
    watch: function (_n, tick, everyMs) {
      const keep = window.dash_clientside.no_update;
      let rearm = keep;
      if (live.lost[tick] !== undefined) {  // Dash will never end that request: we do
        delete live.lost[tick];
        rearm = false;
      }
      const text = banner(everyMs);
      if (text === live.shown[tick]) return [rearm, keep, keep];
      live.shown[tick] = text;
      return [rearm, text, !text];
    },
  };
})();
