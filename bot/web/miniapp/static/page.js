// The form page of toolnexus-bot's Mini App. Plain DOM, no framework, no build step.
// Every text from the server is inserted with textContent (never as HTML). The bot checks everything:
// this script only collects what the native inputs hold and shows the bot's reasons beside the fields.
"use strict";

(function () {
  const tg = window.Telegram && window.Telegram.WebApp ? window.Telegram.WebApp : null;
  const launch = new URLSearchParams(location.hash.slice(1));
  // Without Telegram's script (blocked, offline), the launch data is still in the URL fragment.
  const initData = tg && tg.initData ? tg.initData : launch.get("tgWebAppData") || "";
  const token = location.pathname.split("/").filter(Boolean).pop() || "";
  const app = document.getElementById("app");
  let form = null;
  let busy = false;
  let done = false;

  function applyTheme() {
    let theme = tg && tg.themeParams ? tg.themeParams : null;
    if (!theme || !Object.keys(theme).length) {
      try { theme = JSON.parse(launch.get("tgWebAppThemeParams") || "{}"); } catch (e) { theme = {}; }
    }
    const root = document.documentElement.style;
    for (const [key, value] of Object.entries(theme || {})) {
      if (typeof value === "string" && /^#[0-9a-fA-F]{3,8}$/.test(value)) {
        root.setProperty("--tg-theme-" + key.replace(/_/g, "-"), value);
      }
    }
    const scheme = tg && tg.colorScheme ? tg.colorScheme : null;
    if (scheme === "dark" || scheme === "light") document.documentElement.dataset.scheme = scheme;
  }

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value === true ? "" : String(value));
    }
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  async function post(path, body) {
    const response = await fetch(token + "/" + path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(Object.assign({ initData: initData }, body)),
      credentials: "omit",
    });
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    return { status: response.status, data: data || {} };
  }

  function status(text, kind) {
    let node = document.getElementById("status");
    if (!node) {
      node = el("p", { id: "status", role: "status" });
      app.prepend(node);
    }
    node.textContent = text;
    node.className = kind || "";
  }

  // -- values -------------------------------------------------------------------------------------------

  function pad(n) { return String(n).padStart(2, "0"); }

  function offsetText(date) {
    const minutes = -date.getTimezoneOffset();
    const sign = minutes >= 0 ? "+" : "-";
    const abs = Math.abs(minutes);
    return sign + pad(Math.floor(abs / 60)) + ":" + pad(abs % 60);
  }

  function localInputValue(text) {
    // A date-time default (with its zone) as the datetime-local input shows it: the person's local time.
    const date = new Date(text);
    if (isNaN(date.getTime())) return "";
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) +
      "T" + pad(date.getHours()) + ":" + pad(date.getMinutes());
  }

  function valueOf(field) {
    const id = "f-" + field.index;
    if (field.kind === "boolean" || field.kind === "choice") {
      const picked = app.querySelector('input[name="' + id + '"]:checked');
      if (!picked || picked.value === "") return null;
      if (field.kind === "boolean") return picked.value === "yes";
      return field.options[Number(picked.value)].value;
    }
    if (field.kind === "multi") {
      return Array.from(app.querySelectorAll('input[name="' + id + '"]:checked'))
        .map((box) => field.options[Number(box.value)].value);
    }
    const input = document.getElementById(id);
    const text = input.value;
    if (field.kind === "datetime" && text) {
      // The native picker has no time zone: the person's own, as their device says.
      return text + offsetText(new Date(text));
    }
    return text;
  }

  function values() {
    const out = {};
    for (const field of form.fields) out[field.name] = valueOf(field);
    return out;
  }

  // -- rendering ----------------------------------------------------------------------------------------

  function inputType(kind) {
    return { email: "email", url: "url", date: "date", datetime: "datetime-local", number: "number", integer: "number" }[kind] || "text";
  }

  function label(field, forId) {
    const node = el("label", forId ? { for: forId } : {}, field.title);
    if (field.required) node.append(el("span", { class: "req", "aria-hidden": "true" }, " *"));
    return node;
  }

  function choice(type, name, value, title, checked, hintId) {
    const id = name + "-" + (value === "" ? "none" : value);
    const row = el("div", { class: "option" });
    const input = el("input", { type: type, id: id, name: name, value: value, "aria-describedby": hintId });
    input.checked = checked;
    row.append(input, el("label", { for: id }, title));
    return row;
  }

  function renderField(field) {
    const id = "f-" + field.index;
    const hintId = id + "-hint";
    const reasonId = id + "-reason";
    const described = hintId + " " + reasonId;
    const box = el("div", { class: "field", id: id + "-box" });
    const hint = el("p", { class: "hint", id: hintId });
    if (field.description) hint.append(el("span", { class: "description" }, field.description), el("br"));
    hint.append(document.createTextNode(field.required ? field.hint : field.hint + " (optional)"));
    const reason = el("p", { class: "reason", id: reasonId, "aria-live": "polite" });
    const def = field.default;

    if (field.kind === "boolean" || field.kind === "choice" || field.kind === "multi") {
      const group = el("fieldset", { "aria-describedby": described, "aria-required": field.required ? "true" : null });
      const legend = el("legend", {}, field.title);
      if (field.required) legend.append(el("span", { class: "req", "aria-hidden": "true" }, " *"));
      group.append(legend, hint);
      if (field.kind === "boolean") {
        group.append(choice("radio", id, "yes", "Yes", def === true), choice("radio", id, "no", "No", def === false));
      } else {
        const chosen = Array.isArray(def) ? def : [def];
        field.options.forEach((option, i) => {
          group.append(choice(field.kind === "multi" ? "checkbox" : "radio", id, String(i), option.title, chosen.includes(option.value)));
        });
      }
      if (field.kind !== "multi" && !field.required) {
        group.append(choice("radio", id, "", "No answer", def === null || def === undefined));
      }
      group.append(reason);
      box.append(group);
      group.addEventListener("change", () => check(field));
      return box;
    }

    const attrs = {
      type: inputType(field.kind),
      id: id,
      name: id,
      "aria-describedby": described,
      "aria-required": field.required ? "true" : null,
      autocomplete: "off",
    };
    if (field.kind === "integer" || field.kind === "number") {
      attrs.inputmode = field.kind === "integer" ? "numeric" : "decimal";
      attrs.step = field.kind === "integer" ? "1" : "any";
      attrs.min = field.minimum;
      attrs.max = field.maximum;
    } else {
      attrs.maxlength = field.maxLength;
      attrs.minlength = field.minLength;
    }
    const input = el(field.kind === "text" && (field.maxLength === null || field.maxLength > 120) ? "textarea" : "input", attrs);
    if (input.tagName === "TEXTAREA") { input.removeAttribute("type"); input.rows = 2; }
    if (def !== null && def !== undefined) input.value = field.kind === "datetime" ? localInputValue(String(def)) : String(def);
    if (field.kind === "datetime") hint.append(document.createTextNode(" · your time zone: UTC" + offsetText(new Date())));
    box.append(label(field, id), hint, input, reason);
    input.addEventListener("change", () => check(field));
    return box;
  }

  function showReason(field, text) {
    const reason = document.getElementById("f-" + field.index + "-reason");
    const box = document.getElementById("f-" + field.index + "-box");
    reason.textContent = text ? "⚠️ " + text : "";
    box.classList.toggle("invalid", !!text);
    const control = box.querySelector("input, textarea");
    if (field.kind !== "boolean" && field.kind !== "choice" && field.kind !== "multi" && control) {
      control.setAttribute("aria-invalid", text ? "true" : "false");
    }
  }

  async function check(field) {
    if (done) return;
    const value = valueOf(field);
    const answer = await post("check", { name: field.name, value: value });
    if (answer.status === 200) showReason(field, answer.data.reason);
    else refused(answer);
  }

  function refused(answer) {
    status(answer.data.error || "The bot refused this (" + answer.status + ").", "error");
    if (answer.status === 410 || answer.status === 409 || answer.status === 401 || answer.status === 403) finish(false);
  }

  function finish(closeSoon) {
    done = true;
    for (const control of app.querySelectorAll("input, textarea, button")) control.disabled = true;
    if (tg && tg.MainButton) tg.MainButton.hide();
    if (closeSoon && tg && tg.close) setTimeout(() => tg.close(), 1200);
  }

  async function send(action) {
    if (busy || done) return;
    busy = true;
    if (tg && tg.MainButton && tg.MainButton.showProgress) tg.MainButton.showProgress();
    try {
      const answer = await post("answer", action === "accept" ? { action: action, values: values() } : { action: action });
      if (answer.status === 200) {
        const said = { accept: "Sent. You can close this window.", decline: "Declined.", cancel: "Cancelled." };
        status(said[action], "ok");
        finish(true);
      } else if (answer.status === 422) {
        for (const field of form.fields) showReason(field, (answer.data.errors || {})[field.name]);
        status(answer.data.error ? "⚠️ " + answer.data.error : "⚠️ Some answers need a change (see below each field).", "error");
        const first = app.querySelector(".invalid input, .invalid textarea");
        if (first) first.focus();
      } else {
        refused(answer);
      }
    } catch (e) {
      status("Could not reach the bot; try again.", "error");
    } finally {
      busy = false;
      if (tg && tg.MainButton && tg.MainButton.hideProgress) tg.MainButton.hideProgress();
    }
  }

  function render() {
    app.textContent = "";
    const head = el("header");
    head.append(el("p", { class: "server" }, form.server + " asks:"), el("h1", { id: "message" }, form.message));
    app.append(head, el("p", { id: "status", role: "status" }));
    const body = el("form", { id: "form", novalidate: true });
    form.fields.forEach((field, i) => { field.index = i; body.append(renderField(field)); });
    if (form.fields.some((f) => f.required)) body.append(el("p", { class: "hint" }, "* required"));
    body.addEventListener("submit", (event) => { event.preventDefault(); send("accept"); });
    const actions = el("div", { class: "actions" });
    const submit = el("button", { type: "submit", class: "primary" }, "Submit");
    const decline = el("button", { type: "button" }, "Decline");
    const cancel = el("button", { type: "button" }, "Cancel");
    decline.addEventListener("click", () => send("decline"));
    cancel.addEventListener("click", () => send("cancel"));
    actions.append(submit, decline, cancel);
    body.append(actions);
    app.append(body);
    if (tg && tg.MainButton) {
      tg.MainButton.setText("Submit");
      tg.MainButton.onClick(() => send("accept"));
      tg.MainButton.show();
    }
  }

  async function start() {
    applyTheme();
    if (tg) { if (tg.ready) tg.ready(); if (tg.expand) tg.expand(); }
    if (!initData) {
      status("Open this form from its button in Telegram.", "error");
      return;
    }
    try {
      const answer = await post("form", {});
      if (answer.status !== 200) { refused(answer); return; }
      form = answer.data;
      render();
      document.documentElement.dataset.ready = "true";
    } catch (e) {
      status("Could not reach the bot; try again.", "error");
    }
  }

  start();
})();
