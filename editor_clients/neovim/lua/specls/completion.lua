-- Requests, ghost text state, accept/dismiss. One suggestion per buffer; a newer request cancels the older
-- one, and any edit that does not match the suggestion dismisses it (reported as rejected).
local ghost = require('specls.ghost')
local position = require('specls.position')
local server = require('specls.server')
local suggestion = require('specls.suggestion')

---@class specls.Request
---@field client_id integer
---@field id integer?
---@field tick integer
---@field row integer
---@field col integer
---@field encoding string

---@class specls.Shown
---@field text string
---@field row integer
---@field col integer
---@field end_col integer
---@field id string? the suggestion id (argument of its specls.accept command)
---@field command lsp.Command?
---@field accepted_length integer
---@field tick integer?
---@field from_completion boolean?

---@class specls.BufferState
---@field request specls.Request?
---@field suggestion specls.Shown?
local M = {
  hl_group = 'SpeclsGhostText',
  -- Set when the server does not know textDocument/inlineCompletion: use textDocument/completion.
  use_completion = false,
}

local METHOD_NOT_FOUND = -32601
local states = {} -- bufnr -> { request = {client_id, id, tick, row, col}?, suggestion = {...}? }

---@param bufnr integer
---@return specls.BufferState
local function state(bufnr)
  states[bufnr] = states[bufnr] or {}
  return states[bufnr]
end

---@return integer row 0-based
---@return integer col byte column
local function cursor()
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  return row - 1, col
end

---@param bufnr integer
---@param method string
---@param params table
local function notify(bufnr, method, params)
  local client = server.client()
  if client then
    params.uri = vim.uri_from_bufnr(bufnr)
    client.notify(method, params)
  end
end

--- Cancel the request in flight, if any.
---@param bufnr integer
function M.cancel(bufnr)
  local st = state(bufnr)
  local request = st.request
  st.request = nil
  if request then
    local client = vim.lsp.get_client_by_id(request.client_id)
    if client then
      client.cancel_request(request.id)
    end
  end
end

--- Remove the ghost text; `rejected` reports it to the server's statistics.
---@param bufnr integer
---@param rejected boolean
function M.dismiss(bufnr, rejected)
  local st = state(bufnr)
  if st.suggestion and rejected and st.suggestion.id then
    notify(bufnr, 'specls/didReject', { suggestionId = st.suggestion.id })
  end
  st.suggestion = nil
  ghost.clear(bufnr)
end

---@param bufnr integer
---@param s specls.Shown
local function show(bufnr, s)
  state(bufnr).suggestion = s
  s.tick = vim.api.nvim_buf_get_changedtick(bufnr)
  ghost.show(bufnr, s.row, s.col, s.text, M.hl_group)
end

---@param bufnr integer
---@param request specls.Request
---@param method string
---@param err lsp.ResponseError?
---@param result any
local function on_answer(bufnr, request, method, err, result)
  local st = state(bufnr)
  if st.request == nil or st.request.id ~= request.id then
    return -- a newer request replaced this one
  end
  st.request = nil
  if err then
    if err.code == METHOD_NOT_FOUND and not M.use_completion then
      M.use_completion = true
      M.request(bufnr)
    end
    return
  end
  local row, col = cursor()
  local fresh = vim.api.nvim_get_current_buf() == bufnr
    and vim.api.nvim_buf_get_changedtick(bufnr) == request.tick
    and row == request.row
    and col == request.col
    and vim.api.nvim_get_mode().mode:sub(1, 1) == 'i'
  local item = fresh and suggestion.first_item(result)
  if not item or type(item.text) ~= 'string' then
    return
  end
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
  local fit = suggestion.ghost_for(item, line, col, request.encoding)
  if not fit then
    return
  end
  local command = item.command
  local id = command and command.command == 'specls.accept' and command.arguments and command.arguments[1]
  M.dismiss(bufnr, false)
  show(
    bufnr,
    { text = fit.text, row = row, col = col, end_col = fit.end_col, id = id, command = command, accepted_length = 0 }
  )
  if id and id ~= st.last_shown_id then
    st.last_shown_id = id
    notify(bufnr, 'specls/didShow', { suggestionId = id })
  end
  if method ~= 'textDocument/inlineCompletion' then
    st.suggestion.from_completion = true
  end
end

--- Ask the server for a suggestion at the cursor (cancelling the one in flight).
---@param bufnr integer
function M.request(bufnr)
  M.cancel(bufnr)
  local client = server.client()
  if not client or not vim.lsp.buf_is_attached(bufnr, client.id) then
    return
  end
  local encoding = client.offset_encoding or 'utf-16'
  local params = position.cursor_params(bufnr, 0, encoding)
  local method = 'textDocument/inlineCompletion'
  if M.use_completion then
    method = 'textDocument/completion'
    params.context = { triggerKind = 1 }
  else
    params.context = { triggerKind = 2 } -- Automatic: asked while typing
  end
  local row, col = cursor()
  local request = {
    client_id = client.id,
    tick = vim.api.nvim_buf_get_changedtick(bufnr),
    row = row,
    col = col,
    encoding = encoding,
  }
  local ok, id = client.request(method, params, function(err, result)
    on_answer(bufnr, request, method, err, result)
  end, bufnr)
  if ok then
    request.id = id
    state(bufnr).request = request
  end
end

--- The server finished a suggestion it had answered in part (`specls/suggestionGrown`): ask again, for
--- the whole of it, while that part is still on screen where it was shown and nothing else is being asked.
---@param uri string
---@param generation_id string
function M.on_grown(uri, generation_id)
  local bufnr = vim.api.nvim_get_current_buf()
  local st = states[bufnr]
  local s = st and st.suggestion
  if not s or st.request or not s.id or vim.uri_from_bufnr(bufnr) ~= uri then
    return
  end
  local row, col = cursor()
  if tostring(s.id):match('^[^+]+') == generation_id and row == s.row and col == s.col then
    M.request(bufnr)
  end
end

--- After an edit in insert mode: keep the ghost if the user typed what it predicted, else drop it.
---@param bufnr integer
---@return boolean?
function M.on_text_changed(bufnr)
  local st = state(bufnr)
  local s = st.suggestion
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  if s and s.tick == tick then
    return -- our own accept: the rest of the suggestion stays
  end
  M.cancel(bufnr)
  local row, col = cursor()
  if s and row == s.row and col > s.col then
    local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
    local typed = line:sub(s.col + 1, col)
    if s.text:sub(1, #typed) == typed and #typed < #s.text then
      s.text, s.col, s.end_col = s.text:sub(#typed + 1), col, math.max(col, s.end_col + #typed)
      show(bufnr, s)
      return true
    end
  end
  M.dismiss(bufnr, s ~= nil)
  return true
end

--- The cursor moved without an edit: a suggestion left behind is dismissed.
---@param bufnr integer
function M.on_cursor_moved(bufnr)
  local s = state(bufnr).suggestion
  if s and s.tick == vim.api.nvim_buf_get_changedtick(bufnr) then
    local row, col = cursor()
    if row ~= s.row or col ~= s.col then
      M.cancel(bufnr)
      M.dismiss(bufnr, true)
    end
  end
end

--- Insert all (or a word, or a line) of the suggestion. Returns false when there is nothing to accept.
---@param bufnr integer
---@param kind 'all'|'word'|'line'|nil
---@return boolean
function M.accept(bufnr, kind)
  local st = state(bufnr)
  local s = st.suggestion
  local row, col = cursor()
  if not s or row ~= s.row or col ~= s.col then
    return false
  end
  local piece = suggestion.take(s.text, kind or 'all')
  if piece == '' then
    piece = s.text
  end
  local whole = piece == s.text
  local lines = vim.split(piece, '\n', { plain = true })
  -- A full accept also replaces what the item's range covers after the cursor.
  vim.api.nvim_buf_set_text(bufnr, row, col, row, whole and s.end_col or col, lines)
  local new_row = row + #lines - 1
  local new_col = (#lines == 1 and col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { new_row + 1, new_col })
  s.accepted_length = s.accepted_length + vim.fn.strchars(piece)
  if whole then
    st.suggestion = nil
    ghost.clear(bufnr)
    local client = server.client()
    if client and s.command then
      client.request(
        'workspace/executeCommand',
        { command = s.command.command, arguments = s.command.arguments },
        function() end,
        bufnr
      )
    end
    if s.id then
      notify(bufnr, 'specls/didAccept', { suggestionId = s.id })
    end
  else
    s.text, s.row, s.col = s.text:sub(#piece + 1), new_row, new_col
    s.end_col = new_col
    show(bufnr, s)
    if s.id then
      notify(bufnr, 'specls/didPartiallyAccept', { suggestionId = s.id, acceptedLength = s.accepted_length })
    end
  end
  return true
end

--- Tell the server where the cursor is (`specls/cursor`), so it can warm its cache for a request there.
---@param bufnr integer
function M.report_cursor(bufnr)
  local client = server.client()
  if not client or bufnr ~= vim.api.nvim_get_current_buf() or not vim.lsp.buf_is_attached(bufnr, client.id) then
    return
  end
  local params = position.cursor_params(bufnr, 0, client.offset_encoding or 'utf-16')
  client.notify('specls/cursor', { textDocument = params.textDocument, position = params.position })
end

local cursor_timer = nil
local CURSOR_REST_MS = 250

--- `report_cursor` once the cursor has rested (a burst of moves sends one notification).
---@param bufnr integer
function M.report_cursor_soon(bufnr)
  if cursor_timer then
    cursor_timer:stop()
    cursor_timer:close()
  end
  cursor_timer = vim.defer_fn(function()
    cursor_timer = nil
    M.report_cursor(bufnr)
  end, CURSOR_REST_MS)
end

--- The suggestion shown in `bufnr`, if any.
---@param bufnr integer
---@return specls.Shown?
function M.current(bufnr)
  return state(bufnr).suggestion
end

--- Drop everything about `bufnr` (it was unloaded).
---@param bufnr integer
function M.forget(bufnr)
  M.cancel(bufnr)
  states[bufnr] = nil
end

return M
