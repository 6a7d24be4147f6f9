
(function () {
  "use strict";
  var filter = document.getElementById("filter");
  var toggles = Array.prototype.slice.call(document.querySelectorAll("input[data-status]"));
  var groups = Array.prototype.slice.call(document.querySelectorAll("details.group"));
  var texts = null;
  function apply() {
    var query = filter.value.trim().toLowerCase();
    if (query !== "" ? texts === null : false) {
      texts = groups.map(function (g) { return g.textContent.toLowerCase(); });
    }
    var shown = {};
    toggles.forEach(function (t) { shown[t.getAttribute("data-status")] = t.checked; });
    groups.forEach(function (g, i) {
      var visible = shown[g.getAttribute("data-status")] === true;
      if (visible ? query !== "" : false) { visible = texts[i].indexOf(query) !== -1; }
      g.hidden = !visible;
    });
  }
  filter.addEventListener("input", apply);
  toggles.forEach(function (t) { t.addEventListener("change", apply); });
  apply();
})();
