// The dashboard's only script: an action button asks for confirmation, then posts to the
// JSON API with the header that marks the request as the dashboard's own, and reloads.
// An action's form is never submitted itself (Enter in one of its fields does nothing).
document.addEventListener("submit", (event) => {
  if (event.target.matches("form.inline")) event.preventDefault();
});
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  event.preventDefault();
  if (!window.confirm(button.dataset.confirm)) return;
  const body = button.dataset.body ? JSON.parse(button.dataset.body) : {};
  const form = button.dataset.form && document.getElementById(button.dataset.form);
  if (form) {
    for (const field of form.elements) {
      if (!field.name || field.value.trim() === "") continue;
      body[field.name] = field.type === "number" ? Number(field.value) : field.value.trim();
    }
  }
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
