<?php
/*
 * The bare rename protocol of docs/protocol.md (acquire: rename lockfile to
 * a token; release: rename it back) with the ways of waiting that
 * docs/waiting-turnstile.md compares. A prototype for measuring: it does
 * not judge or take over a holder, nor create the lock directory (the
 * caller makes D/lockfile); its tokens name another host, so that the
 * library judges them by their one-hour lease only.
 *
 * Schemes (Scheme::named):
 *   poll    the modules' waiting before the turnstile: backoff from 100 us
 *           to 50 ms, a lookup before each rename, a listing every 10 ms;
 *   block   waiters flock(LOCK_EX) the turnstile D/turnstile; its holder,
 *           the head, polls the lock every HEAD_US; the others sleep in
 *           flock() and never look at the lock;
 *   nb      the same with flock(LOCK_EX|LOCK_NB) retried every NB_US, and a
 *           look at the lock every OWN_MS by each sleeper, so that a wait
 *           budget is kept and a turnstile held by anyone costs latency
 *           only;
 *   fair    nb, and a head that has waited HUNGRY_US marks the turnstile
 *           hungry (size 1) and polls every 100 us; a newcomer that sees
 *           the mark lines up instead of renaming the freed token past it;
 *   deputy  fair, and a second place, D/turnstile.next: its holder tries
 *           the head's place every DEPUTY_US, so that a new head is
 *           waiting soon after the last one took the lock;
 *   aged, ageddeputy
 *           fair and deputy (trying every 500 us) with sleepers that retry
 *           every 16 ms at first and twice as often for every 25 ms they
 *           have waited, down to every 2 ms;
 *   agedbarge
 *           aged, but a newcomer does not read the hungry mark (no lstat on
 *           the fast path): only waiters line up behind a hungry head;
 *   bell    aged, and the hungry head sleeps on an abstract Unix datagram
 *           socket whose address is its mark; a releaser that finds the
 *           mark sends it a byte, so the head wakes at the release (it
 *           still polls every HEAD_US for holders that do not ring).
 */

declare(strict_types=1);

namespace TurnstileBench;

final class Scheme
{
    public function __construct(
        public string $line = 'none',   // none | block | nb
        public int $headUs = 1000,
        public int $nbUs = 2000,
        public int $ownMs = 100,
        public int $hungryUs = 0,       // 0: no hungry mark
        public int $hungryPollUs = 100,
        public int $deputyUs = 0,       // 0: no deputy
        public int $ageMs = 0,          // 0: sleepers retry every nbUs however long they waited
        public bool $newcomersYield = true,  // false: only waiters heed the hungry mark
        public bool $bell = false,      // a hungry head sleeps on a socket that releasers ring
    ) {
    }

    /**
     * The schemes by name; a tail "@H/N/G/D" sets, in microseconds, the
     * head's poll interval, the sleepers' retry interval, the wait after
     * which a head is hungry, and the deputy's retry interval.
     */
    public static function named(string $name): self
    {
        [$base, $tune] = array_pad(explode('@', $name, 2), 2, '');
        $s = match ($base) {
            'poll' => new self(),
            'block' => new self('block'),
            'nb' => new self('nb'),
            'fair' => new self('nb', hungryUs: 1000),
            'fairblock' => new self('block', hungryUs: 1000),
            'deputy' => new self('nb', hungryUs: 1000, deputyUs: 200),
            'aged' => new self('nb', nbUs: 16000, hungryUs: 1000, ageMs: 25),
            'agedbarge' => new self('nb', nbUs: 16000, hungryUs: 1000, ageMs: 25, newcomersYield: false),
            'bell' => new self('nb', nbUs: 16000, hungryUs: 1000, ageMs: 25, bell: true),
            'ageddeputy' => new self('nb', nbUs: 16000, hungryUs: 1000, deputyUs: 500, ageMs: 25),
            default => throw new \InvalidArgumentException("unknown scheme $name"),
        };
        if ($tune !== '') {
            $t = array_map('intval', explode('/', $tune));
            $s->headUs = $t[0];
            $s->nbUs = $t[1] ?? $s->nbUs;
            $s->hungryUs = $t[2] ?? $s->hungryUs;
            $s->deputyUs = $t[3] ?? $s->deputyUs;
        }
        return $s;
    }
}

final class RenameLock
{
    public const FREE = 'lockfile';
    public const TURNSTILE = 'turnstile';
    public const DEPUTY = 'turnstile.next';
    private const BACKOFF_MIN_US = 100;
    private const BACKOFF_MAX_US = 50000;
    private const LOOK_EVERY_NS = 10000000;
    private const AGED_US = 2000;

    private string $token = '';
    /** @var resource|null the turnstile, kept open between waits */
    private $turn = null;
    /** @var resource|null the deputy's place, second in line */
    private $next = null;
    private int $lastLook = 0;
    /** When the current acquisition began (hrtime ns). */
    private int $since = 0;
    /** Why the last wait did not use the turnstile ('' when it did). */
    public string $fallback = '';

    public function __construct(private string $dir, private Scheme $scheme)
    {
    }

    /** Acquires within WAIT seconds (null: no limit); false when the budget ran out. */
    public function acquire(?float $wait): bool
    {
        $this->since = hrtime(true);
        $deadline = $wait === null ? PHP_INT_MAX : $this->since + (int) ($wait * 1e9);
        $s = $this->scheme;
        // A hungry head is owed the next release: a newcomer lines up
        // behind it rather than renaming the freed token first.
        $owed = $s->hungryUs > 0 && $s->newcomersYield && $this->lineIsHungry();
        if (!$owed && $this->tryRename(true)) {
            return true;
        }
        if ($s->line === 'none' || !$this->openTurnstile()) {
            return $this->poll($deadline);
        }
        return $this->line($deadline);
    }

    public function release(): void
    {
        if (!@rename("$this->dir/$this->token", "$this->dir/" . self::FREE)) {
            throw new \RuntimeException("release $this->dir: cannot rename $this->token back: lock lost");
        }
        if ($this->scheme->bell) {
            $this->ring();
        }
    }

    /**
     * Wakes a hungry head at once instead of at its next poll: its mark is
     * the address of its socket (an abstract Unix socket, so nothing is
     * made in D). One lstat when there is no mark; a wrong or stale
     * address costs a datagram that nobody reads.
     */
    private function ring(): void
    {
        $path = "$this->dir/" . self::TURNSTILE;
        clearstatcache(true, $path);
        $st = @lstat($path);
        if ($st === false || $st['size'] < 2 || ($st['mode'] & 0170000) !== 0100000) {
            return;
        }
        $name = @file_get_contents($path, false, null, 0, 64);
        if (is_string($name) && preg_match('/\A\0tl-[0-9a-f]{16}\z/', $name) === 1
            && ($c = @stream_socket_client("udg://$name")) !== false) {
            @fwrite($c, 'x');
            fclose($c);
        }
    }

    /** This process's bell: an abstract datagram socket, made once. */
    private function bellSocket()
    {
        static $bell = null, $name = '';
        if ($bell === null) {
            $name = "\0tl-" . bin2hex(random_bytes(8));
            $bell = @stream_socket_server("udg://$name", $errno, $errstr, STREAM_SERVER_BIND) ?: false;
        }
        return $bell === false ? [false, ''] : [$bell, $name];
    }

    /** The hungry head's wait: on its bell when it has one, else a sleep. */
    private function hungryWait(int $us): void
    {
        [$bell] = $this->scheme->bell ? $this->bellSocket() : [false];
        if ($bell === false) {
            usleep($us);
            return;
        }
        $r = [$bell];
        $w = $e = null;
        if (@stream_select($r, $w, $e, 0, $us) > 0) {
            stream_socket_recvfrom($bell, 16);
        }
    }

    /** Sets the hungry mark: 1 byte, or with a bell its address. */
    private function markHungry(): bool
    {
        [$bell, $name] = $this->scheme->bell ? $this->bellSocket() : [false, ''];
        if ($bell === false) {
            return ftruncate($this->turn, 1);
        }
        fseek($this->turn, 0);
        return fwrite($this->turn, $name) === strlen($name);
    }

    /**
     * One rename of the free token. After a first failure a lookup, which
     * takes no lock, comes first: a failed rename locks the directory and
     * stalls the holder's own rename.
     */
    private function tryRename(bool $first): bool
    {
        if (!$first) {
            clearstatcache(true, "$this->dir/" . self::FREE);
            if (@lstat("$this->dir/" . self::FREE) === false) {
                return false;
            }
        }
        $this->token = self::token();
        return @rename("$this->dir/" . self::FREE, "$this->dir/$this->token");
    }

    /** A token of the protocol's grammar that names another host (judged by its lease). */
    private static function token(): string
    {
        $expiry = (int) (microtime(true) * 1e6) + 3600000000;
        return sprintf('lockfile.%d.proto-00000000.%d.0.%s', $expiry, getmypid(), bin2hex(random_bytes(8)));
    }

    /** The listing a waiter makes every 10 ms to judge the holder (its cost, not its verdict). */
    private function lookNow(): void
    {
        $now = hrtime(true);
        if ($now - $this->lastLook >= self::LOOK_EVERY_NS) {
            $this->lastLook = $now;
            @scandir($this->dir);
        }
    }

    /** The modules' waiting before the turnstile: jittered backoff, 100 us to 50 ms. */
    private function poll(int $deadline): bool
    {
        $delay = self::BACKOFF_MIN_US;
        while (true) {
            $left = intdiv($deadline - hrtime(true), 1000);
            if ($left <= 0) {
                return $this->tryRename(false);
            }
            usleep(max(1, min((int) ($delay * (0.75 + 0.5 * mt_rand() / mt_getrandmax())), $left)));
            if ($this->tryRename(false)) {
                return true;
            }
            $this->lookNow();
            $delay = min(2 * $delay, self::BACKOFF_MAX_US);
        }
    }

    /** Opens the turnstile, and the deputy's when the scheme has one; false: poll instead. */
    private function openTurnstile(): bool
    {
        $this->turn = $this->openPlace(self::TURNSTILE, $this->turn);
        if ($this->turn !== null && $this->scheme->deputyUs > 0) {
            $this->next = $this->openPlace(self::DEPUTY, $this->next);
        }
        return $this->turn !== null && ($this->scheme->deputyUs === 0 || $this->next !== null);
    }

    /**
     * Opens (or, having seen the lock held, creates) D/NAME. Anything at
     * that name but a regular file of one link that is ours or the lock
     * directory owner's, not writable by others, is left alone and the wait
     * polls instead. PHP has no O_NOFOLLOW: the name is judged by lstat and
     * the handle by fstat, and the two must be the same file. O_RDWR ('r+')
     * never blocks on a FIFO. Only trusted users can add entries to D.
     *
     * @param resource|null $kept
     * @return resource|null
     */
    private function openPlace(string $name, $kept)
    {
        $path = "$this->dir/$name";
        if ($kept !== null && fstat($kept)['nlink'] === 1) {
            return $kept;  // still the file at that name, unless removed and made again: a hint either way
        }
        clearstatcache(true, $path);
        $dirOwner = @lstat($this->dir)['uid'] ?? -1;
        $seen = @lstat($path);
        // Judged before it is opened, so that a link to a device is never opened.
        $why = $seen === false ? '' : self::judgeTurnstile($seen, $dirOwner);
        $fp = $why !== '' ? false : ($seen === false ? @fopen($path, 'x+') : @fopen($path, 'r+'));
        if ($fp === false) {
            $this->fallback = "$name: " . ($why ?: ($seen === false ? 'cannot create' : 'cannot open'));
            return null;
        }
        $st = fstat($fp);
        $why = self::judgeTurnstile($st, $dirOwner);
        if ($why === '' && $seen !== false && ($seen['dev'] !== $st['dev'] || $seen['ino'] !== $st['ino'])) {
            $why = 'swapped between lstat and open';
        }
        if ($why !== '') {
            fclose($fp);
            $this->fallback = "$name: $why";
            return null;
        }
        if ($seen === false) {
            chmod($path, 0600);  // exactly, whatever the umask; a group-shared lock gives 0660
        }
        $this->fallback = '';
        return $fp;
    }

    /** Why a file with status ST is not a turnstile to use ('' when it is). */
    private static function judgeTurnstile(array $st, int $dirOwner): string
    {
        if (($st['mode'] & 0170000) !== 0100000) {
            return 'not a regular file';
        }
        if ($st['nlink'] !== 1) {
            return 'more than one link';
        }
        $me = function_exists('posix_geteuid') ? posix_geteuid() : $st['uid'];
        if ($st['uid'] !== $me && $st['uid'] !== $dirOwner) {
            return 'owned by another user';
        }
        return ($st['mode'] & 0002) ? 'writable by others' : '';
    }

    /** Whether a head has marked the turnstile hungry (one lstat: the fast path's only extra call). */
    private function lineIsHungry(): bool
    {
        $path = "$this->dir/" . self::TURNSTILE;
        clearstatcache(true, $path);
        $st = @lstat($path);
        return $st !== false && $st['size'] > 0;
    }

    /** Waits in the turnstile, and as its head, until the lock is ours or the budget ends. */
    private function line(int $deadline): bool
    {
        while (true) {
            if ($this->enterTurnstile($deadline)) {
                return $this->head($deadline);
            }
            // A sleeper's own look: the bound on what a stuck head costs.
            if ($this->tryRename(false)) {
                return true;
            }
            if (hrtime(true) >= $deadline) {
                return false;
            }
        }
    }

    /** Becomes the head (true), or false when the sleeper's own look or its deadline is due. */
    private function enterTurnstile(int $deadline): bool
    {
        if ($this->scheme->line === 'block') {
            return flock($this->turn, LOCK_EX);
        }
        $until = min($deadline, hrtime(true) + $this->scheme->ownMs * 1000000);
        while (true) {
            if (flock($this->turn, LOCK_EX | LOCK_NB)) {
                return true;
            }
            if ($this->next !== null && flock($this->next, LOCK_EX | LOCK_NB)) {
                return $this->deputy($until);
            }
            $left = intdiv($until - hrtime(true), 1000);
            if ($left <= 0) {
                return false;
            }
            usleep(min($this->sleeperPause(), $left));
        }
    }

    /**
     * How long a sleeper sleeps between tries of the places: with aging,
     * the interval halves for every AGE_MS waited, down to AGED_US, so
     * that of the sleepers the one that waited longest most likely takes a
     * place that frees (nearly first come, first served, without a queue
     * to keep), and newcomers cost few wake-ups. The floor bounds the
     * wake-ups of a long line: 64 sleepers at 2 ms are 32,000 a second.
     */
    private function sleeperPause(): int
    {
        $s = $this->scheme;
        if ($s->ageMs === 0) {
            return $s->nbUs;
        }
        $halvings = min(30, intdiv(intdiv(hrtime(true) - $this->since, 1000000), $s->ageMs));
        return max(self::AGED_US, $s->nbUs >> $halvings);
    }

    /**
     * Second in line: tries the head's place every DEPUTY_US, so that a new
     * head is waiting within that time of the last one taking the lock;
     * the sleepers behind it have a whole turn of the lock to take its
     * place, and may sleep longer.
     */
    private function deputy(int $until): bool
    {
        while (true) {
            $got = flock($this->turn, LOCK_EX | LOCK_NB);
            $left = intdiv($until - hrtime(true), 1000);
            if ($got || $left <= 0) {
                flock($this->next, LOCK_UN);
                return $got;
            }
            usleep(min($this->scheme->deputyUs, $left));
        }
    }

    /**
     * The head polls the lock at a short interval (it alone looks at the
     * lock), and leaves the turnstile once it holds the lock or gives up,
     * so that the next head is waiting before the next release.
     */
    private function head(int $deadline): bool
    {
        $s = $this->scheme;
        $since = hrtime(true);
        // A mark left by a head that died is this head's to clear.
        $hungry = fstat($this->turn)['size'] > 0;
        while (true) {
            $got = $this->tryRename(false);
            $now = hrtime(true);
            if ($got || $now >= $deadline) {
                break;
            }
            $this->lookNow();
            if ($s->hungryUs > 0 && !$hungry && $now - $since >= $s->hungryUs * 1000) {
                $hungry = $this->markHungry();
            }
            $left = max(1, intdiv($deadline - $now, 1000));
            // With a bell, rung by native releasers, the hungry head polls
            // only for holders that do not ring (the C++ library's).
            $hungry ? $this->hungryWait(min($s->bell ? $s->headUs : $s->hungryPollUs, $left)) : usleep(min($s->headUs, $left));
        }
        if ($hungry) {
            ftruncate($this->turn, 0);
        }
        flock($this->turn, LOCK_UN);
        return $got;
    }
}
