/* fleetwatch: an open page keeps refreshing across a dashboard restart (see live.py). */
(function () {
  "use strict";
  // lost: input id -> when a request with that input got no answer; down: since when the
  // dashboard does not answer (null while it does), and how.
  const live = {lost: {}, okAt: null, downSince: null, why: "", shown: {}};
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
    return answer.then(res => {
      if (res.status < 400) {  // 204 is Dash's "nothing to update"
        live.okAt = Date.now();
        live.downSince = null;
      } else {  // Dash ends the request itself: the tick is re-armed, only the banner is ours
        down("it answered HTTP " + res.status);
      }
      return res;
    }, err => {
      const at = Date.now();
      inputIds(init || {}).forEach(id => { live.lost[id] = at; });
      down("no answer");
      throw err;
    });
  };

  function utc(ms) {
    return new Date(ms).toISOString().slice(11, 19) + " UTC";
  }

  function banner(everyMs) {
    if (live.downSince === null) return "";
    const secs = Math.round((Date.now() - live.downSince) / 1000);
    const last = live.okAt === null ? "no answer since the page was opened"
      : "last answer at " + utc(live.okAt);
    return "Dashboard not answering since " + utc(live.downSince) + " (" + secs + " s, " +
      live.why + "): this page is as of its " + last + ", not now. Retrying every " +
      Math.max(1, Math.round(everyMs / 1000)) + " s.";
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
