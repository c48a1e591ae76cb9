// The dashboard's only script. An action button asks for confirmation (its text's {name}
// replaced by the value of the form's field `name`), then posts to the JSON API with the
// header that marks the request as the dashboard's own, and reloads.
// An action's form is never submitted itself (Enter in one of its fields does nothing).
document.addEventListener("submit", (event) => {
  if (event.target.matches("form.inline")) event.preventDefault();
});
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  event.preventDefault();
  const body = button.dataset.body ? JSON.parse(button.dataset.body) : {};
  const form = button.dataset.form && document.getElementById(button.dataset.form);
  if (form) {
    for (const field of form.elements) {
      if (!field.name || field.value.trim() === "") continue;
      body[field.name] = field.type === "number" ? Number(field.value) : field.value.trim();
    }
  }
  const confirm = button.dataset.confirm.replace(/\{(\w+)\}/g, (all, name) => body[name] ?? all);
  if (!window.confirm(confirm)) return;
  const message = document.getElementById("message");
  const response = await fetch(button.dataset.action, {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json", "x-formica-ui": "1" },
    body: JSON.stringify(body),
  });
  if (response.ok) {
    window.location.reload();
    return;
  }
  const answer = await response.json().catch(() => ({ error: response.statusText }));
  message.textContent = answer.error;
  message.hidden = false;
});

// A bulk action on the jobs page, on the ticked jobs or on all the jobs matching the page's
// filter: a dry run first, so the confirmation states how many jobs will change.
async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json", "x-formica-ui": "1" },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => ({ error: response.statusText }));
  if (response.ok) return answer;
  const message = document.getElementById("message");
  message.textContent = answer.error;
  message.hidden = false;
  return null;
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-bulk]");
  if (!button) return;
  event.preventDefault();
  const body = { action: button.dataset.bulk };
  if (button.dataset.filter) {
    body.filter = JSON.parse(button.dataset.filter);
  } else {
    body.filter = { ids: [...document.querySelectorAll("input.pick:checked")].map((box) => Number(box.value)) };
    if (body.filter.ids.length === 0) {
      const message = document.getElementById("message");
      message.textContent = "Tick the jobs to act on first.";
      message.hidden = false;
      return;
    }
  }
  const form = document.getElementById(button.dataset.form);
  const field = (name) => form && form.elements[name] && form.elements[name].value.trim();
  if (body.action === "cancel" && field("reason")) body.reason = field("reason");
  if (body.action === "reschedule") body.run_at = field("run_at") || new Date().toISOString();
  const counted = await post("/api/jobs/bulk", { ...body, dry_run: true });
  if (!counted) return;
  if (!window.confirm(button.dataset.confirm.replace("{n}", counted.jobs))) return;
  if (await post("/api/jobs/bulk", body)) window.location.reload();
});

// Auto-refresh: while the header's box is ticked (remembered across pages and visits), the
// page fetches its own address every two seconds and swaps in the new <main>: no page
// load, so nothing flickers and the scroll position stays. It waits while the tab is
// hidden, while a form field has focus or holds an edit, and while text is selected, so
// nothing a person is doing is thrown away.
const REFRESH_EVERY_MS = 2000;
const REMEMBER = "formica-auto-refresh";
const toggle = document.getElementById("auto-refresh");

function remembered() {
  try {
    return window.localStorage.getItem(REMEMBER) === "on";
  } catch {
    return false; // storage refused (a private window, say): off
  }
}

// Whether a field of `root` holds what a person changed (a ticked box included; a select
// without a `selected` option shows its first).
function edited(root) {
  const fields = [...root.querySelectorAll("input, textarea")];
  const chosen = (select) => Math.max(0, [...select.options].findIndex((o) => o.defaultSelected));
  return (
    fields.some((f) => f.value !== f.defaultValue || f.checked !== f.defaultChecked) ||
    [...root.querySelectorAll("select")].some((s) => s.selectedIndex !== chosen(s))
  );
}

function busy(main) {
  const active = document.activeElement;
  if (active && main.contains(active) && active.matches("input, select, textarea")) return true;
  const selection = window.getSelection();
  if (selection && !selection.isCollapsed && main.contains(selection.anchorNode)) return true;
  return edited(main);
}

// The element of `fresh` standing where `old` stood (same action or link), to keep focus.
function counterpart(fresh, old) {
  for (const name of ["data-action", "href", "id"]) {
    const value = old.getAttribute(name);
    if (value) return fresh.querySelector(`[${name}="${CSS.escape(value)}"]`);
  }
  return null;
}

async function refresh() {
  const main = document.querySelector("main");
  if (!toggle.checked || document.hidden || !main || busy(main)) return;
  const response = await fetch(window.location.href, { credentials: "same-origin" });
  if (!(response.headers.get("content-type") || "").startsWith("text/html")) {
    throw new Error(`the dashboard answered ${response.status}`);
  }
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html").querySelector("main");
  // Check again: the person may have started something while the page was on its way.
  if (!fresh || !toggle.checked || busy(main) || fresh.innerHTML === main.innerHTML) return;
  const message = document.getElementById("message");
  if (message && !message.hidden) fresh.querySelector("#message")?.replaceWith(message);
  const focused = main.contains(document.activeElement) ? document.activeElement : null;
  main.replaceWith(fresh);
  if (focused) counterpart(fresh, focused)?.focus({ preventScroll: true });
}

async function keepRefreshing() {
  try {
    await refresh();
    toggle.parentElement.classList.remove("stale");
    toggle.parentElement.title = "Reload this page's content every 2 seconds";
  } catch (e) {
    toggle.parentElement.classList.add("stale");
    toggle.parentElement.title = `The last refresh failed: ${e.message}`;
  }
  window.setTimeout(keepRefreshing, REFRESH_EVERY_MS);
}

if (toggle) {
  toggle.checked = remembered();
  toggle.addEventListener("change", () => {
    try {
      window.localStorage.setItem(REMEMBER, toggle.checked ? "on" : "off");
    } catch {
      // Not remembered: it still works on this page.
    }
  });
  window.setTimeout(keepRefreshing, REFRESH_EVERY_MS);
}
