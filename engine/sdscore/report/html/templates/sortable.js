// Sortable tables: click (or Enter on) a column header to sort by it; again to reverse.
// Cells sort by their data-sort value: numerically when every value in the column is a number.
(function () {
  "use strict";
  function sortTable(table, column, header) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var keys = rows.map(function (row) {
      var cell = row.cells[column];
      return cell ? (cell.getAttribute("data-sort") || cell.textContent) : "";
    });
    var numeric = keys.every(function (key) { return key === "" || key === "—" || !isNaN(parseFloat(key)); });
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    var order = rows.map(function (row, i) { return i; });
    order.sort(function (a, b) {
      var x = keys[a], y = keys[b], result;
      if (numeric) {
        var fx = parseFloat(x), fy = parseFloat(y);
        if (isNaN(fx) && isNaN(fy)) { result = 0; }
        else if (isNaN(fx)) { return 1; }   // missing values last either way
        else if (isNaN(fy)) { return -1; }
        else { result = fx - fy; }
      } else {
        result = x.localeCompare(y);
      }
      return (ascending ? result : -result) || a - b;
    });
    order.forEach(function (i) { body.appendChild(rows[i]); });
    Array.prototype.forEach.call(header.parentNode.cells, function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }
  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
      var headers = table.tHead ? table.tHead.rows[0].cells : [];
      Array.prototype.forEach.call(headers, function (header, column) {
        header.addEventListener("click", function () { sortTable(table, column, header); });
        header.addEventListener("keydown", function (event) {
          if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sortTable(table, column, header); }
        });
      });
    });
  });
})();
