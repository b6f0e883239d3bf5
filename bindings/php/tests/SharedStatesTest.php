<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Exception;
use Tokenlock\Lock;
use Tokenlock\Native;
use Tokenlock\NotAcquiredException;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;

use function Tokenlock\holders;

/**
 * Shared states made by hand, byte for byte as docs/protocol.md, Shared locks and semaphores: names
 * them (as another implementation, or another host, leaves them), and
 * what a trusted neighbour can plant (Hostile neighbours): what the
 * module makes of each, and that whatever it must not touch is left as
 * it was.
 */
final class SharedStatesTest extends TempDirTestCase
{
    private const NONCE = '0123456789abcdef';

    private function lockDir(): string
    {
        $d = "$this->dir/a.lock";
        if (!is_dir($d)) {
            Lock::acquire($d)->release();
        }
        return $d;
    }

    /** The one token name in DIR. */
    private static function token(string $dir): string
    {
        $t = array_values(array_filter(scandir($dir), fn ($n) => str_starts_with($n, 'lockfile')));
        return count($t) === 1 ? $t[0] : implode(',', $t);
    }

    /** @return list<string> the entries s.* in the token of DIR, sorted */
    private static function entries(string $dir): array
    {
        $e = array_values(array_filter(scandir("$dir/" . self::token($dir)), fn ($n) => str_starts_with($n, 's.')));
        sort($e);
        return $e;
    }

    private function assertFreeAndEmpty(string $dir): void
    {
        $this->assertSame('lockfile', self::token($dir));
        $this->assertSame([], array_values(array_diff(scandir("$dir/lockfile"), ['.', '..'])));
    }

    public function testAReaderConvertsAnotherHostsLoneShareByteForByte(): void
    {
        $dir = $this->lockDir();
        $e = Native::nowUs() + 600000000;
        // Host "far", hash8 12345678: its stag is edcba987; pid 4242, start 12345.
        $lone = "lockfile.$e.far-edcba987.4242.10000000000000012345." . self::NONCE;
        rename("$dir/lockfile", "$dir/$lone");
        $lock = Lock::acquireShared($dir, ['lease' => 60]);
        $me = Native::identity();
        $copy = self::entries($dir)[0] === $lock->token() ? self::entries($dir)[1] : self::entries($dir)[0];
        $this->assertMatchesRegularExpression("/\\As\\.$e\\.far-12345678\\.4242\\.12345\\.01234567[0-9a-f]{8}\\z/", $copy, "our copy of the lone holder's share: its real tag, its start without zeros, the first half of its nonce");
        $this->assertNotSame("s.$e.far-12345678.4242.12345." . self::NONCE, $copy, 'the second half of the nonce is ours, not the lone share\'s');
        $this->assertMatchesRegularExpression('/\As\.[0-9]+\.' . preg_quote($me['owner'], '/') . '[0-9a-f]{16}\z/', $lock->token());
        $cover = self::token($dir);
        $this->assertMatchesRegularExpression('/\Alockfile\.([0-9]+)\.' . preg_quote(Native::flipTag($me['tag']), '/') . '\.' . $me['pid'] . '\.11000000' . sprintf('%012d', $me['start']) . '\.[0-9a-f]{16}\z/', $cover, 'a group cover of readers naming its last renamer');
        $this->assertGreaterThanOrEqual($e + 1, (int) explode('.', $cover)[1], 'the cover rule: at least the latest entry');
        $lock->release();
        $this->assertSame([$copy], self::entries($dir), "the other host's share is kept");
        $this->assertSame(['shared'], array_column(holders($dir), 'mode'));
        // A writer marks it, and unmarks when its wait ends.
        try {
            Lock::acquire($dir, ['wait' => 0.1]);
            $this->fail('a writer got in beside a live share');
        } catch (\Tokenlock\TimeoutException $x) {
            $this->assertStringContainsString('shared', $x->getMessage());
        }
        $this->assertMatchesRegularExpression('/\Alockfile\.[0-9]+\.[^.]+\.[0-9]+\.11000000[0-9]{12}\.[0-9a-f]{16}\z/', self::token($dir), 'unmarked: a group cover again');
        $this->assertSame([$copy], self::entries($dir));
    }

    public function testStaleEntriesGoByTheirExactNamesAndNothingTheyPointAtIsTouched(): void
    {
        $dir = $this->lockDir();
        $a = Lock::acquireShared($dir);
        $b = Lock::acquireShared($dir);
        $tok = "$dir/" . self::token($dir);
        $victim = "$this->dir/victim";
        mkdir($victim);
        file_put_contents("$victim/data", 'keep');
        $past = Native::nowUs() - 10000000;
        $me = Native::identity();
        $stale = fn (string $n) => "s.$past.{$me['owner']}" . str_pad($n, 16, '0', STR_PAD_LEFT);
        mkdir("$tok/" . $stale('1'));
        symlink($victim, "$tok/" . $stale('2'));
        posix_mkfifo("$tok/" . $stale('3'), 0600);
        link("$victim/data", "$tok/" . $stale('4'));
        touch("$tok/" . $stale('5'));
        // Implausibly far ahead (more than 24 h): stale at once.
        mkdir("$tok/s." . (Native::nowUs() + 90000000000) . ".{$me['owner']}" . str_pad('6', 16, '0', STR_PAD_LEFT));
        $this->assertCount(8, self::entries($dir));
        $this->assertSame(['shared', 'shared'], array_column(array_filter(holders($dir), fn ($h) => !$h['stale']), 'mode'), 'stale entries hold nobody');
        $a->release();
        $b->release();
        $this->assertFreeAndEmpty($dir);
        $this->assertSame(['.', '..', 'data'], scandir($victim));
        $this->assertSame('keep', file_get_contents("$victim/data"));
        $this->assertSame(1, stat("$victim/data")['nlink'], 'the hard link lost its one name');
    }

    public function testANonEmptyDirectoryAtAStaleEntryIsCorruptAndLeftAlone(): void
    {
        $dir = $this->lockDir();
        $a = Lock::acquireShared($dir);
        $b = Lock::acquireShared($dir);
        $past = Native::nowUs() - 10000000;
        $odd = "s.$past.{$this->owner()}" . self::NONCE;
        mkdir("$dir/" . self::token($dir) . "/$odd");
        file_put_contents("$dir/" . self::token($dir) . "/$odd/file", 'x');
        $a->release();
        try {
            $b->release();
            $this->fail('a non-empty entry was removed or ignored');
        } catch (Exception $e) {
            $this->assertSame('lock_corrupt', $e->getError());
            $this->assertStringContainsString($odd, $e->getMessage());
        }
        $this->assertFalse($b->isHeld(), 'our share ended all the same');
        $this->assertSame('x', file_get_contents("$dir/" . self::token($dir) . "/$odd/file"));
        $this->assertSame([$odd], self::entries($dir));
        // A reader joins past it (it needs no empty token); a writer and
        // the last one out say what is wrong.
        $c = Lock::acquireShared($dir, ['wait' => 0]);
        foreach ([fn () => $c->release(), fn () => Lock::acquire($dir, ['wait' => 0])] as $step) {
            try {
                $step();
                $this->fail('a token that cannot be emptied was freed or taken');
            } catch (Exception $e) {
                $this->assertSame('lock_corrupt', $e->getError());
            }
        }
        $this->assertSame([$odd], self::entries($dir));
        $this->assertSame('x', file_get_contents("$dir/" . self::token($dir) . "/$odd/file"));
    }

    public function testATokenDirectoryWritableByOthersIsRefusedAndLeftAlone(): void
    {
        $dir = $this->lockDir();
        $a = Lock::acquireShared($dir);
        $b = Lock::acquireShared($dir);
        $cover = self::token($dir);
        chmod("$dir/$cover", 0777);
        try {
            Lock::acquireShared($dir, ['wait' => 0]);
            $this->fail('joined through a token others can write');
        } catch (Exception $e) {
            $this->assertSame('untrusted', $e->getError());
            $this->assertStringContainsString($cover, $e->getMessage());
        }
        $this->assertSame($cover, self::token($dir));
        $this->assertCount(2, self::entries($dir), 'nothing made in it');
        chmod("$dir/$cover", 0755);
        $a->release();
        $b->release();
        $this->assertFreeAndEmpty($dir);
    }

    public function testAMalformedEntryIsCorruptToTheLastOneOutAndToAWriterAndLeftAlone(): void
    {
        $dir = $this->lockDir();
        $a = Lock::acquireShared($dir);
        $b = Lock::acquireShared($dir);
        $cover = self::token($dir);
        mkdir("$dir/$cover/s.junk");
        $a->release();
        foreach (['the last one out' => fn () => $b->release(), 'a writer' => fn () => Lock::acquire($dir, ['wait' => 0])] as $who => $step) {
            try {
                $step();
                $this->fail("$who went past an entry it cannot judge");
            } catch (Exception $e) {
                $this->assertSame('lock_corrupt', $e->getError(), $who);
                $this->assertStringContainsString('s.junk', $e->getMessage());
            }
            $this->assertTrue(is_dir("$dir/" . self::token($dir) . '/s.junk'));
            $this->assertNotSame('lockfile', self::token($dir), 'not freed or taken with an entry nobody can judge');
        }
        $this->assertFalse($b->isHeld(), 'our share ended all the same');
    }

    private function owner(): string
    {
        return Native::identity()['owner'];
    }

    /** @return iterable<string, array{0: string}> */
    public static function plantedTokens(): iterable
    {
        yield 'symbolic link' => ['link'];
        yield 'FIFO' => ['fifo'];
        yield 'file' => ['file'];
    }

    /** @dataProvider plantedTokens */
    public function testALinkFifoOrFileAsTheTokenIsNeverGoneThrough(string $kind): void
    {
        $dir = $this->lockDir();
        $victim = "$this->dir/victim";
        mkdir($victim);
        rmdir("$dir/lockfile");
        $lone = 'lockfile.' . (Native::nowUs() + 600000000) . '.' . Native::flipTag(Native::identity()['tag']) . '.' . getmypid() . '.1000000000' . sprintf('%010d', Native::identity()['start']) . '.' . self::NONCE;
        match ($kind) {
            'link' => symlink($victim, "$dir/$lone"),
            'fifo' => posix_mkfifo("$dir/$lone", 0600),
            'file' => file_put_contents("$dir/$lone", 'kept'),
        };
        $start = microtime(true);
        try {
            Lock::acquireShared($dir, ['wait' => 0.2]);
            $this->fail('joined through a planted token');
        } catch (NotAcquiredException $e) {
            $this->assertStringContainsString('no directory', $e->getMessage());
        }
        $this->assertLessThan(3.0, microtime(true) - $start, 'never blocked on it');
        $this->assertSame(['.', '..'], scandir($victim), 'nothing made through it');
        $this->assertSame([$lone], array_values(array_filter(scandir($dir), fn ($n) => str_starts_with($n, 'lockfile'))));
        if ($kind === 'file') {
            $this->assertSame('kept', file_get_contents("$dir/$lone"));
        }
    }

    public function testALegacyFileTokenAdmitsOneSharedHolderAtATime(): void
    {
        $dir = "$this->dir/legacy";
        mkdir($dir);
        file_put_contents("$dir/lockfile", 'script');
        $a = Lock::acquireShared($dir);
        $this->assertTrue(is_file("$dir/{$a->token()}"), 'the fast path renames the file');
        $this->assertNull(Lock::tryAcquire($dir, ['shared' => true]), 'no entry can be made in a file');
        $a->release();
        $this->assertSame('script', file_get_contents("$dir/lockfile"));
        $this->assertSame(['.', '..', 'lockfile'], scandir($dir));
    }

    public function testADeadWritersMarkIsUnmarkedAndReadersJoin(): void
    {
        $dir = $this->lockDir();
        $a = Lock::acquireShared($dir);
        $b = Lock::acquireShared($dir);
        $dead = Child::start(function (Channel $ch): void {
            $ch->send((string) Native::identity()['start']);
        });
        $start = (int) $dead->channel->receive();
        $this->assertSame(0, $dead->wait());
        $cover = self::token($dir);
        $mark = 'lockfile.' . (Native::nowUs() + 600000000) . '.' . Native::flipTag(Native::identity()['tag']) . ".{$dead->pid}.12000000" . sprintf('%012d', $start) . '.' . self::NONCE;
        rename("$dir/$cover", "$dir/$mark");
        $this->assertContains('waiting', array_column(holders($dir), 'mode'));
        $c = Lock::acquireShared($dir, ['wait' => 2]);
        $this->assertNotContains('waiting', array_column(holders($dir), 'mode'));
        $this->assertSame(['shared', 'shared', 'shared'], array_column(holders($dir), 'mode'));
        foreach ([$a, $b, $c] as $l) {
            $l->release();
        }
        $this->assertFreeAndEmpty($dir);
    }

    public function testALockHandedToAnotherWriterIsItsUntilItDies(): void
    {
        $dir = $this->lockDir();
        $writer = Child::start(function (Channel $ch): void {
            $ch->send(Native::identity()['start']);
            $ch->receive();
        });
        $start = $writer->channel->receive();
        // Its mark, with no entry left: the last one out has not handed it over yet.
        $mark = 'lockfile.' . (Native::nowUs() + 600000000) . '.' . Native::flipTag(Native::identity()['tag']) . ".{$writer->pid}.12000000" . sprintf('%012d', $start) . '.' . self::NONCE;
        rename("$dir/lockfile", "$dir/$mark");
        foreach ([[], ['shared' => true]] as $asked) {
            $this->assertNull(Lock::tryAcquire($dir, $asked + ['wait' => 0.1]), 'the waiting writer keeps its mark');
            $this->assertSame($mark, self::token($dir));
        }
        $writer->kill();
        $start = microtime(true);
        $lock = Lock::acquire($dir, ['wait' => 5]);
        $this->assertLessThan(1.0, microtime(true) - $start, "a dead writer's mark is taken at once");
        $this->assertSame(['exclusive'], array_column(holders($dir), 'mode'));
        $lock->release();
        $this->assertFreeAndEmpty($dir);
    }

    /**
     * Our lone share, converted while a losing converter's copy is still
     * there: [the lock directory, our lock, the far host's entry, our two
     * copies].
     *
     * @return array{0: string, 1: Lock, 2: string, 3: list<string>}
     */
    private function convertedWithTwoCopies(): array
    {
        $dir = $this->lockDir();
        $lock = Lock::acquireShared($dir, ['lease' => 60]);
        [, $expiry, , , , $nonce] = explode('.', $lock->token());
        $copies = ["s.$expiry.{$this->owner()}" . substr($nonce, 0, 8) . '0000aaaa', "s.$expiry.{$this->owner()}" . substr($nonce, 0, 8) . '0000bbbb'];
        $far = 's.' . (Native::nowUs() + 600000000) . '.far-12345678.4242.12345.' . self::NONCE;
        foreach ([...$copies, $far] as $entry) {
            mkdir("$dir/{$lock->token()}/$entry");
        }
        // The far host's converter won: a group cover naming it.
        rename("$dir/{$lock->token()}", "$dir/lockfile." . (Native::nowUs() + 600000001) . '.far-edcba987.4242.11000000000000012345.' . self::NONCE);
        return [$dir, $lock, $far, $copies];
    }

    public function testAConvertedLoneShareIsOneHolderWhateverItsCopiesAndLeavesWithAllOfThem(): void
    {
        [$dir, $lock, $far, $copies] = $this->convertedWithTwoCopies();
        $this->assertSame(['shared', 'shared'], array_column(holders($dir), 'mode'), 'two copies of one lone share are one holder');
        $this->assertTrue($lock->holdsNow(), 'our share is its copies');
        $lock->release();
        $this->assertSame([$far], self::entries($dir), 'every copy removed, the far host\'s share kept');
        $this->assertSame(['shared'], array_column(holders($dir), 'mode'));
    }

    public function testAConvertedLoneShareRefreshesToAnEntryOfItsOwnAndNoCopyIsLeft(): void
    {
        [$dir, $lock, $far, $copies] = $this->convertedWithTwoCopies();
        $cover = self::token($dir);
        $entry = $lock->refresh(90);
        $this->assertMatchesRegularExpression('/\As\.[0-9]+\.' . preg_quote($this->owner(), '/') . '[0-9a-f]{16}\z/', $entry, 'our own entry, our own nonce');
        $this->assertSame(array_values(array_diff(self::entries($dir), [$entry])), [$far], 'no copy left beside it');
        $this->assertNotSame($cover, self::token($dir), 'the cover renamed to cover the new lease');
        $this->assertGreaterThanOrEqual(explode('.', $entry)[1], explode('.', self::token($dir))[1], 'the cover rule');
        $lock->release();
        $this->assertSame([$far], self::entries($dir));
    }

    public function testAConvertedLoneShareWithNoOtherHolderIsPromotedAndNoCopyIsLeft(): void
    {
        [$dir, $lock, $far] = $this->convertedWithTwoCopies();
        rmdir("$dir/" . self::token($dir) . "/$far");
        $this->assertTrue($lock->toExclusive(60), 'only our copies are there');
        $this->assertSame(['exclusive'], array_column(holders($dir), 'mode'));
        $this->assertSame([], self::entries($dir));
        $lock->release();
        $this->assertFreeAndEmpty($dir);
    }

    public function testAReaderThatCanJoinDoesNotLineUpBehindAHungryHead(): void
    {
        $dir = $this->lockDir();
        if (!in_array(Native::dirFsType($dir), ['ext4', 'xfs', 'btrfs', 'tmpfs', 'overlay', 'zfs', 'f2fs', 'ext3', 'ext2'], true)) {
            $this->markTestSkipped("$dir is not on a local filesystem: no turnstile there");
        }
        $a = Lock::acquireShared($dir);
        $b = Lock::acquireShared($dir);
        $old = umask(077);
        file_put_contents("$dir/turnstile", 'h');  // a head marked it hungry (size 1)
        umask($old);
        $start = microtime(true);
        $c = Lock::acquireShared($dir, ['wait' => 5]);
        $this->assertLessThan(0.1, microtime(true) - $start, 'joined at once, not after the head');
        $this->assertSame(1, filesize("$dir/turnstile"), 'the line was left as it was');
        foreach ([$a, $b, $c] as $l) {
            $l->release();
        }
        unlink("$dir/turnstile");
        $this->assertFreeAndEmpty($dir);
    }
}
