-- Pure helpers: what an answer suggests, what part of it is still to be typed, what accept-word takes.
local position = require('specls.position')

---@class specls.Item
---@field text string
---@field range lsp.Range?
---@field command lsp.Command?

---@class specls.Ghost
---@field text string what is still to be typed
---@field end_col integer byte column where the item's range ends (at least the cursor)
local M = {}

--- The first item of an inline completion or completion answer as {text, range, command}, or nil.
---@param result any an InlineCompletionList, a CompletionList or a list of items
---@return specls.Item?
function M.first_item(result)
  local items = type(result) == 'table' and (result.items or result) or {}
  local item = items[1]
  if type(item) ~= 'table' then
    return nil
  end
  if item.insertText ~= nil and item.label == nil then -- InlineCompletionItem
    local text = type(item.insertText) == 'table' and item.insertText.value or item.insertText
    return { text = text, range = item.range, command = item.command }
  end
  local edit = item.textEdit -- CompletionItem: TextEdit or InsertReplaceEdit
  if edit then
    return { text = edit.newText, range = edit.range or edit.insert, command = item.command }
  end
  return { text = item.insertText or item.label, command = item.command }
end

--- What to draw at the cursor for `item` on `line`: the part of its text the user has not typed yet.
---@param item specls.Item
---@param line string the cursor line
---@param col integer byte column of the cursor (0-based)
---@param encoding string the client's offset encoding
---@return specls.Ghost?
function M.ghost_for(item, line, col, encoding)
  local start_col, end_col = col, col
  if item.range then
    start_col = position.from_lsp(line, item.range.start.character, encoding)
    end_col = math.max(col, position.from_lsp(line, item.range['end'].character, encoding))
  end
  local typed = line:sub(start_col + 1, col)
  if item.text:sub(1, #typed) ~= typed then
    return nil -- the answer no longer fits what is in the buffer
  end
  local text = item.text:sub(#typed + 1)
  if text == '' then
    return nil
  end
  return { text = text, end_col = end_col }
end

--- The part of `text` that accept-word / accept-line take.
---@param text string
---@param kind 'all'|'word'|'line'
---@return string
function M.take(text, kind)
  if kind == 'line' then
    local lead, rest = text:match('^(\n?)(.*)$')
    return lead .. (rest:match('^[^\n]*') or '')
  elseif kind == 'word' then
    local lead = text:match('^\n?[ \t]*')
    local rest = text:sub(#lead + 1)
    return lead .. (rest:match('^[%w_]+') or rest:match('^[^%w_%s]+') or '')
  end
  return text
end

return M
